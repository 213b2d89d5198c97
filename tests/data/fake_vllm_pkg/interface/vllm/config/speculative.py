"""No model-type list: whether the target can feed eagle3 is its model class's business."""


class SpeculativeConfig:
    def __init__(self, method, num_speculative_tokens=None):
        self.method = method
        self.num_speculative_tokens = num_speculative_tokens

    def _verify_args(self):
        if self.num_speculative_tokens is None or self.num_speculative_tokens <= 0:
            raise ValueError("num_speculative_tokens must be positive")
        return self
