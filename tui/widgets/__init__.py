"""Widgets of the TUI, one module each."""
