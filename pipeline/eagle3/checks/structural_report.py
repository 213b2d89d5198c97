"""What the structural checks found: :class:`StructuralReport`.

Its own module because both :mod:`pipeline.eagle3.checks.structural` and :mod:`pipeline.eagle3.checks.vocab` add to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.actions import Check
from pipeline.eagle3.model.checkpoint_files import DrafterLayout

__all__ = ["StructuralReport"]


@dataclass
class StructuralReport:
    checks: list[Check] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    layout: DrafterLayout | None = None
    files: list[Path] = field(default_factory=list)

    def add(self, name: str, passed: bool, value: Any = None, expected: Any = None,
            message: str = "") -> Check:
        c = Check(name=name, passed=bool(passed), value=value, expected=expected,
                  message=message)
        self.checks.append(c)
        return c

    def skip(self, name: str, why: str) -> None:
        self.skipped.append(f"{name}: {why}")

    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]
