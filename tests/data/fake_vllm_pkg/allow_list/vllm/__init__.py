"""Stand-in for a vLLM 0.11-era release (see ../../README.md)."""
__version__ = "0.11.0"
