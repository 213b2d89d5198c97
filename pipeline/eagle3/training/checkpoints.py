"""``eagle3.train``'s output directory: a checkpoint after every epoch, the state naming the
latest, resuming from it, and discarding what a run under other settings left.

``OUT/checkpoints/epoch-NNN/`` holds ``model.safetensors`` and ``drafter_config.json`` (the
drafter's own saver writes them) and ``trainer.pt`` (optimizer, schedule, history);
``OUT/state.json`` names the latest, written atomically after the checkpoint, so a crash
mid-save resumes from the one before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pipeline.eagle3.common import CONFIG_FILE, atomic_write_text, log
from pipeline.errors import ActionError

__all__ = ["STATE", "discard", "latest", "resume", "save"]

STATE = "state.json"


def save(out: Path, epoch: int, drafter: Any, optimizer: Any, scheduler: Any,
         history: list, digest: str | None, save_weights: Any) -> None:
    """Epoch ``epoch``'s checkpoint, then the state that names it."""
    import torch

    ckpt = out / "checkpoints" / f"epoch-{epoch:03d}"
    save_weights(drafter, ckpt)
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "epoch": epoch, "history": history, "config_hash": digest},
               ckpt / "trainer.pt")
    atomic_write_text(out / STATE, json.dumps({"epoch": epoch, "checkpoint":
                                               str(ckpt.relative_to(out)),
                                               "config_hash": digest}, indent=2))
    log(f"[train] checkpoint {ckpt}")


def latest(out: Path) -> Path | None:
    """The checkpoint the state names, or None before the first epoch ends."""
    state_file = out / STATE
    if not state_file.exists():
        return None
    return out / json.loads(state_file.read_text())["checkpoint"]


def resume(out: Path, drafter: Any, optimizer: Any, scheduler: Any, device: Any
           ) -> tuple[int, list]:
    """Load the latest checkpoint into the drafter, optimizer and schedule: the epochs done
    and the history so far; (0, []) for a fresh directory."""
    import torch

    from pipeline.eagle3.model.drafter_files import load_safetensors

    state_file = out / STATE
    if not state_file.exists():
        return 0, []
    state = json.loads(state_file.read_text())
    ckpt = out / state["checkpoint"]
    drafter.load_state_dict(load_safetensors(ckpt / "model.safetensors"))
    try:
        trainer = torch.load(ckpt / "trainer.pt", map_location=device, weights_only=False)
    except (OSError, RuntimeError, EOFError) as exc:
        raise ActionError(f"unreadable trainer state ({exc})",
                          where=str(ckpt / "trainer.pt")) from None
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    return int(state["epoch"]), list(trainer["history"])


def discard(out: Path) -> None:
    """Remove what an earlier run under other settings left: its checkpoints, its state
    and its configuration record (nothing else in OUT is ours to remove)."""
    gone = sorted(p.name for p in (out / "checkpoints").glob("epoch-*")) \
        if (out / "checkpoints").is_dir() else []
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    for name in (STATE, CONFIG_FILE):
        (out / name).unlink(missing_ok=True)
    log(f"[train] on_other_config restart: discarded {len(gone)} checkpoint(s) an earlier "
        f"run under other settings left in {out}")
