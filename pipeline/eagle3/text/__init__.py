"""Text data for the stages: chat rendering, synthetic corpora, the OpenAI backend, data files and held-out prompts."""
