"""What a person waits for: every everyday `harness` command, and the TUI painting a big
board and showing another process's write."""
