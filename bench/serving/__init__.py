"""Serving measurements: what our benchmark client costs, and our served benchmark beside
vLLM's own ``vllm bench serve`` (whose driver runs in vLLM's interpreter)."""
