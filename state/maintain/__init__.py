"""Looking after a store: copying it to another database, rebuilding its projections from the events."""
