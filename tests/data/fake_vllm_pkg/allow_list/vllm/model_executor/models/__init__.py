class _Registry:
    def __init__(self):
        self.models = {"LlamaForCausalLM": None, "Qwen3ForCausalLM": None,
                       "Eagle3LlamaForCausalLM": None, "LlamaForCausalLMEagle3": None}

    def get_supported_archs(self):
        return self.models.keys()


ModelRegistry = _Registry()
