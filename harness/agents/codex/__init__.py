"""Codex: its hooks, its config and the watcher of its session files."""
