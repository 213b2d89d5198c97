"""State layer: SQLModel tables, engine setup, migrations, the event log, projections,
snapshots and the replay fold. Nothing outside this package writes SQL."""
