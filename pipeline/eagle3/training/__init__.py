"""Training the drafter: set-up, batches, the test-time-training loop and online training."""
