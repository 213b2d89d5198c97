"""Pipeline layer: specs, executors, detached jobs and the built-in (EAGLE-3) actions.

Stage code here imports only torch, transformers, safetensors, pyyaml and the standard
library, so it runs on bare GPU images. Executors that need fabric are imported lazily.
This package never touches the store: it reports through return values and callbacks.
"""
