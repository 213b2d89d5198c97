"""Synthetic reasoning chats for the tiny verifier. Standard library only.

Each task has a user question, a short, formulaic chain of reasoning and an answer, so a tiny
model trained on them learns to write ``<think>`` ... ``</think>`` before answering. Words
come from identifiers in the Python standard library's own source, which is on every machine.
"""

from __future__ import annotations

import random
import re
import sysconfig
from collections.abc import Callable
from pathlib import Path

Task = tuple[str, str, str]  # (question, reasoning, answer)


def stdlib_files(limit: int | None = None) -> list[Path]:
    """The top-level ``*.py`` files of the running interpreter's standard library, sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())
    return files[:limit] if limit else files


def stdlib_words(files: list[Path], min_len: int = 3, max_len: int = 9) -> list[str]:
    words: set[str] = set()
    pattern = re.compile(r"\bdef ([a-z]+)\b")
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        words.update(w for w in pattern.findall(text) if min_len <= len(w) <= max_len)
    if not words:  # a stripped interpreter without sources still gets a usable task set
        words = {"alpha", "bravo", "charlie", "delta", "echo", "socket", "thread", "queue"}
    return sorted(words)


def _spell(word: str) -> str:
    return " ".join(word)


def _add(rng: random.Random, words: list[str]) -> Task:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    ones = a % 10 + b % 10
    carry = ones // 10
    tens = a // 10 + b // 10 + carry
    reasoning = (f"Add {a} and {b}. Ones: {a % 10} + {b % 10} = {ones}, write {ones % 10} "
                 f"carry {carry}. Tens: {a // 10} + {b // 10} + {carry} = {tens}. "
                 f"So the sum is {a + b}.")
    return f"What is {a} + {b}?", reasoning, f"{a} + {b} = {a + b}."


def _reverse(rng: random.Random, words: list[str]) -> Task:
    w = rng.choice(words)
    return (f"Reverse the word {w}.",
            f"Spell it: {_spell(w)}. Backwards: {_spell(w[::-1])}.",
            f"The reverse of {w} is {w[::-1]}.")


def _length(rng: random.Random, words: list[str]) -> Task:
    w = rng.choice(words)
    count = " ".join(str(i) for i in range(1, len(w) + 1))
    return (f"How many letters are in {w}?",
            f"Spell it: {_spell(w)}. Count them: {count}.",
            f"{w} has {len(w)} letters.")


def _compare(rng: random.Random, words: list[str]) -> Task:
    a, b = rng.sample(range(10, 100), 2)
    hi, lo = max(a, b), min(a, b)
    return (f"Which is larger, {a} or {b}?",
            f"Compare the tens: {a // 10} and {b // 10}. {hi} is larger than {lo}.",
            f"{hi} is larger.")


def _upper(rng: random.Random, words: list[str]) -> Task:
    w = rng.choice(words)
    return (f"Write {w} in capitals.",
            f"Spell it: {_spell(w)}. In capitals: {_spell(w.upper())}.",
            f"{w.upper()}")


def _sort(rng: random.Random, words: list[str]) -> Task:
    nums = rng.sample(range(1, 100), 3)
    s = sorted(nums)
    return (f"Sort {nums[0]}, {nums[1]} and {nums[2]}.",
            f"The smallest is {s[0]}. Then {s[1]}. The largest is {s[2]}.",
            f"{s[0]}, {s[1]}, {s[2]}")


TASKS: list[Callable[[random.Random, list[str]], Task]] = [
    _add, _reverse, _length, _compare, _upper, _sort]


def make_tasks(n: int, seed: int, words: list[str]) -> list[Task]:
    rng = random.Random(seed)
    return [rng.choice(TASKS)(rng, words) for _ in range(n)]
