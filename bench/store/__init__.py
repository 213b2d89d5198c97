"""The store under load: concurrent writers, leased claims under a race, replay seeks, the
cost of full history on a list write, and change detection."""
