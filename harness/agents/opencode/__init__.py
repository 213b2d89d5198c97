"""opencode: the events of its plugin (examples/opencode-plugin/) and its exports for import."""
