"""Talking to vLLM: its command line and errors, the compatibility table, the /metrics parser,
the streaming client, and the speculation schedule."""
