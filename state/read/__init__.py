"""Reading the store: the readers' queries and watching for changes."""
