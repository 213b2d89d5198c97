"""Later rename: names that already start or end with Eagle3 are kept."""


class EAGLEConfig:
    def __init__(self, model=None, method="eagle", **kwargs):
        archs = list((model or {}).get("architectures") or [])
        if method == "eagle3":
            archs = [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}"
                     for a in archs]
        self.architectures = archs
