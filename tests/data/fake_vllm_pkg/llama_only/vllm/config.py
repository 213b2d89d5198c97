"""One config module, as older releases had; the eagle3 target check wants 'llama'."""


class SpeculativeConfig:
    def __init__(self, method, target_model_config=None):
        self.method = method
        self.target_model_config = target_model_config

    def _verify_args(self):
        model_type = self.target_model_config.hf_text_config.model_type
        if self.method == "eagle3" and "llama" not in model_type:
            raise ValueError(f"Eagle3 is only supported for Llama models. Got {model_type=}")
