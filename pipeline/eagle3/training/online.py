"""Online training data: the frozen verifier makes each batch's states as training needs it.

``eagle3.train --online --tokens DIR --verifier DIR`` uses :class:`OnlineData` in place of
the shards: the same samples (tokens-file order), the same held-out split and the same
batches as offline training on shards of the same tokens (:class:`pipeline.eagle3.training.train_data.SampleSplit`),
so the first step's loss is the offline one. Per batch the verifier runs its body under
``no_grad`` with the extraction's capture hooks (:class:`..states.extraction.Capture`); the aux
states and the final norm's output become a :class:`pipeline.eagle3.training.train_data.Batch`, padding zeroed as
the shards' padding is. Nothing is written.

When to choose it: when the verifier and the drafter's training fit on the devices together
(the verifier's weights and one forward's activations, plus the drafter, its optimizer state
and its activations). Offline needs ``tokens x (3 + 1) x hidden x bytes`` of disk instead
(:func:`pipeline.eagle3.plan.disk_estimate.offline_bytes`), and its extraction runs once for all epochs; online runs the
verifier every epoch.
"""

from __future__ import annotations

from typing import Any

import torch

from pipeline.eagle3.common import config_hash, dtype_name
from pipeline.eagle3.plan.disk_estimate import offline_bytes
from pipeline.eagle3.training.train_data import Batch, SampleSplit


class OnlineData(SampleSplit):
    def __init__(self, tokens: dict[str, Any], model: Any, input_device: Any,
                 aux_layers: list[int], *, seed: int, holdout: float, max_length: int,
                 dtype: Any, verifier_config: dict[str, Any]):
        from pipeline.eagle3.states.extraction import Capture

        self.tokens = tokens
        offsets = tokens["offsets"]
        n = len(offsets) - 1
        super().__init__([int(offsets[i + 1] - offsets[i]) for i in range(n)], seed=seed,
                         holdout=holdout, max_length=max_length)
        self.model = model
        self.input_device = input_device
        self.dtype = dtype
        self.capture = Capture(model, aux_layers, out_device=input_device)
        hidden = int(verifier_config["hidden_size"])
        self.index = {
            "aux_layers": list(aux_layers), "hidden_size": hidden,
            "config_hash": config_hash({"verifier_config": verifier_config,
                                        "aux_layers": list(aux_layers),
                                        "dtype": dtype_name(dtype), "tokens": n}),
            "dtype": dtype_name(dtype)}

    @property
    def aux_layers(self) -> list[int]:
        return list(self.index["aux_layers"])

    def input_counts(self, vocab_size: int) -> torch.Tensor:
        """How often each token is a drafter row's input over the tokens file."""
        from pipeline.eagle3.model.peagle import drafter_input_counts

        return drafter_input_counts(self.tokens["input_ids"], self.tokens["offsets"],
                                    vocab_size)

    @property
    def offline_bytes(self) -> int:
        """What offline training would have stored for these tokens."""
        return offline_bytes(int(self.tokens["offsets"][-1]), int(self.index["hidden_size"]),
                             self.dtype.itemsize, len(self.aux_layers))

    def load(self, batch: list[int], pin: bool = False) -> Batch:
        """The batch's states, computed now, on the verifier's input device."""
        offsets, input_ids, loss_mask = (self.tokens["offsets"], self.tokens["input_ids"],
                                         self.tokens["loss_mask"])
        lengths = [self.lengths[i] for i in batch]
        width = max(lengths)
        ids = torch.zeros(len(batch), width, dtype=torch.int64)
        mask = torch.zeros(len(batch), width, dtype=torch.uint8)
        for r, (i, n) in enumerate(zip(batch, lengths, strict=True)):
            a = int(offsets[i])
            ids[r, :n] = input_ids[a:a + n].long()
            mask[r, :n] = loss_mask[a:a + n]
        dev_ids = ids.to(self.input_device)
        with torch.no_grad():
            aux, last = self.capture(dev_ids)
            valid = (torch.arange(width, device=self.input_device)[None, :] <
                     torch.tensor(lengths, device=self.input_device)[:, None])
            # The shards hold zeros past each sample's end; so does this batch.
            keep = valid[..., None]
            aux_cat = torch.where(keep, torch.cat(aux, dim=-1), 0)
            last = torch.where(keep, last, 0)
        return Batch(aux_cat, last, dev_ids, mask.to(self.input_device), sum(lengths))

    def close(self) -> None:
        self.capture.remove()
