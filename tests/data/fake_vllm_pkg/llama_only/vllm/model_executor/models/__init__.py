"""A registry that knows the prefixed drafter name only."""


class _Registry:
    def __init__(self):
        self.models = {"LlamaForCausalLM": None, "Qwen3ForCausalLM": None,
                       "Eagle3LlamaForCausalLM": None, "EagleLlamaForCausalLM": None}

    def get_supported_archs(self):
        return self.models.keys()


ModelRegistry = _Registry()
