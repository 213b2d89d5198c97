"""pi: the harness's extension (a todowrite tool), what it asks, and pi's sessions for import."""
