"""GitHub Copilot CLI: its hooks, their install, and its session events for import."""
