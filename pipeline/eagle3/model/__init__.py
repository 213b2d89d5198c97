"""The drafter model and its files: EAGLE-3 and P-EAGLE modules, checkpoints, the speculative loop, verifier shapes."""
