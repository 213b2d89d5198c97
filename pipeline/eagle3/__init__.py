"""The EAGLE-3 stages: verifier -> generate -> clean -> tokenize -> hidden_states -> vocab ->
train -> export.

Each stage is a module run as ``python -m pipeline.eagle3.<step>`` (see
:mod:`pipeline.actions` for the contract). Shared pieces live beside them:

- :mod:`.common`: config hashes, JSONL, progress lines, device/dtype choice;
- :mod:`.chat`: prompt shapes, reasoning reassembly, think-tag checks;
- :mod:`.datafiles`: the token, frequency and vocab-mapping files;
- :mod:`.shards`: hidden-state shards (write, read, validate);
- :mod:`.drafter`: the EAGLE-3 drafter model and :func:`.drafter.load_drafter`;
- :mod:`.ttt`: the training-time-test loss and per-position accuracy.

Stage code imports only torch, transformers, safetensors, tokenizers, pyyaml and the standard
library, so it runs on a bare GPU image.
"""
