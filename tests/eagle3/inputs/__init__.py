"""What the drafter learns from: generated text (local and OpenAI-compatible), chat shapes,
cleaning, tokens, the vocabulary map, and hidden states from either backend."""
