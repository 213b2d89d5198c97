"""Model classes, loaded lazily as vLLM's registry does."""


class LlamaForCausalLM:
    supports_eagle3 = True


class DeepseekV3ForCausalLM:
    supports_eagle3 = True


class Gemma3ForCausalLM:
    supports_eagle3 = False


class Eagle3LlamaForCausalLM:
    pass
