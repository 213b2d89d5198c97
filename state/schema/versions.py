"""The names of the migrations this code knows, in order (``state/schema/migrations.py`` holds
them). Readable without SQLAlchemy, so opening an up-to-date store costs one query."""

MIGRATION_NAMES: tuple[str, ...] = ("001_baseline", "002_store_id", "003_import_sources",
                                     "004_run_series", "005_claim_leases",
                                     "006_write_keys")
