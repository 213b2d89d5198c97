"""Older rename: every drafter architecture gets the Eagle3 prefix."""


class EAGLEConfig:
    def __init__(self, model=None, method="eagle", **kwargs):
        archs = list((model or {}).get("architectures") or [])
        self.architectures = [f"Eagle3{a}" for a in archs] if method == "eagle3" else archs
