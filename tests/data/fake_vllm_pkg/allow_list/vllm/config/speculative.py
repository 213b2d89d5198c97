"""The eagle3 target check is a list of model_type substrings."""


class SpeculativeConfig:
    def __init__(self, method, target_model_config=None):
        self.method = method
        self.target_model_config = target_model_config

    def _verify_args(self):
        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss"]
        model_type = self.target_model_config.hf_text_config.model_type
        if self.method == "eagle3" and not any(s in model_type
                                               for s in eagle3_target_supported):
            raise ValueError(f"Eagle3 is only supported for {eagle3_target_supported} "
                             f"models. Got {model_type=}")
        return self
