def supports_eagle3(model):
    return bool(getattr(model, "supports_eagle3", False))
