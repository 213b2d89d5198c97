"""The checks verify and preflight make: structural, functional, vocab, vLLM compatibility and weights."""
