import importlib


class _Lazy:
    def __init__(self, cls_name):
        self.cls_name = cls_name

    def load_model_cls(self):
        return getattr(importlib.import_module("vllm.model_executor.models.families"),
                       self.cls_name)


class _Registry:
    def __init__(self):
        names = ["LlamaForCausalLM", "DeepseekV3ForCausalLM", "Gemma3ForCausalLM",
                 "Eagle3LlamaForCausalLM"]
        self.models = {n: _Lazy(n) for n in names}
        self.models["LlamaForCausalLMEagle3"] = _Lazy("Eagle3LlamaForCausalLM")

    def get_supported_archs(self):
        return self.models.keys()


ModelRegistry = _Registry()
