"""The ``needs`` graph of a pipeline's stages: cycles and a stable topological order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from pipeline.errors import SpecError

__all__ = ["Node", "find_cycle", "topological_order", "upstream"]


class Node(Protocol):
    """What the graph reads of a stage: its name and the names it needs."""

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> Sequence[str]: ...


Stage = TypeVar("Stage", bound=Node)


def find_cycle(stages: Sequence[Node]) -> list[str] | None:
    """A cycle in ``needs`` as ``[a, b, a]``, or None. Unknown names are ignored."""
    needs = {s.name: [n for n in s.needs] for s in stages}
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in needs.get(name, []):
            if dep not in needs:
                continue
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[name] = 2
        return None

    for stage in stages:
        if stage.name not in state and (found := visit(stage.name)):
            return found
    return None


def topological_order(stages: Sequence[Stage]) -> list[Stage]:
    """Kahn's algorithm, always taking the earliest ready stage in file order."""
    by_name = {s.name: s for s in stages}
    waiting = {s.name: {n for n in s.needs if n in by_name} for s in stages}
    done: list[Stage] = []
    while waiting:
        ready = [s for s in stages if s.name in waiting and not waiting[s.name]]
        if not ready:
            cycle = find_cycle(stages) or sorted(waiting)
            raise SpecError(f"needs form a cycle: {' -> '.join(cycle)}")
        first = ready[0]
        done.append(first)
        del waiting[first.name]
        for deps in waiting.values():
            deps.discard(first.name)
    return done


def upstream(stages: Sequence[Stage], name: str) -> list[Stage]:
    """Every stage ``name`` needs, directly or through others, in file order."""
    by_name = {s.name: s for s in stages}
    seen: set[str] = set()
    todo = list(by_name[name].needs) if name in by_name else []
    while todo:
        dep = todo.pop()
        if dep in seen or dep not in by_name:
            continue
        seen.add(dep)
        todo += by_name[dep].needs
    return [s for s in stages if s.name in seen]


def downstream(stages: Sequence[Stage], name: str) -> list[str]:
    """Every stage that needs ``name``, directly or through others, in file order."""
    return [s.name for s in stages if any(u.name == name for u in upstream(stages, s.name))]
