"""Series and what shows them: the `@series` line and its points in the store, `harness
metrics` and `harness plot`, chart models, and the HTML report in Chromium."""
