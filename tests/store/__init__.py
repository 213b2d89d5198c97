"""The store itself: transactions, migrations and projections, its files, copies between
databases, Ctrl-C in a write, and PostgreSQL's routes and server."""
