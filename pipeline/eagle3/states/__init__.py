"""Hidden states: capture from the verifier (transformers or vLLM) and the shards they are written to."""
