"""The database: engines and connections, SQL dialects (SQLite, PostgreSQL) and the SQL itself."""
