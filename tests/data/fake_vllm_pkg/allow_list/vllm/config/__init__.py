from vllm.config.speculative import SpeculativeConfig

__all__ = ["SpeculativeConfig"]
