"""Stand-in for a vLLM 0.9-era release (see ../../README.md)."""
__version__ = "0.9.2"
