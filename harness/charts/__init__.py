"""Series drawn: charts for the terminal, the TUI and the HTML report."""
