"""The tables, their migrations and the schema versions."""
