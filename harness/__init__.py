"""Use cases: sessions, todo commands, the agent list merge, the runner, importers, the
CLI and the MCP server. Imports `state` and `pipeline`; never the TUI (except the one
lazy door in `harness.cli.tui_cmd`)."""

__version__ = "0.1.0"
