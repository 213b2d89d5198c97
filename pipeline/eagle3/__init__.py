"""The EAGLE-3 stages: verifier -> generate -> clean -> tokenize -> hidden_states -> vocab ->
train -> export.

Each stage is a module run as ``python -m pipeline.eagle3.<step>`` (see
:mod:`pipeline.actions` for the contract). Shared pieces live beside them:

- :mod:`.common`: config hashes, JSONL, progress lines, device/dtype choice;
- :mod:`pipeline.eagle3.text.chat`: prompt shapes, reasoning reassembly, think-tag checks;
- :mod:`pipeline.eagle3.text.datafiles`: the token, frequency and vocab-mapping files;
- :mod:`pipeline.eagle3.states.shards`: hidden-state shards (write, read, validate);
- :mod:`pipeline.eagle3.model.drafter`: the EAGLE-3 drafter model and :func:`pipeline.eagle3.model.drafter.load_drafter`;
- :mod:`pipeline.eagle3.training.ttt`: the training-time-test loss and per-position accuracy.

Stage code imports only torch, transformers, safetensors, tokenizers, pyyaml and the standard
library, so it runs on a bare GPU image.
"""
