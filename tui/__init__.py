"""The Textual TUI. Reads through `state`, changes things through `harness` commands."""
