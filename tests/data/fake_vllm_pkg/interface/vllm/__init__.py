"""Stand-in for the newest vLLM: no eagle3 model-type list (see ../../README.md)."""
__version__ = "0.21.0"
