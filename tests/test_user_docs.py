"""The README and docs/ speak to users: nothing about how the project's own GPU figures were
taken (how vLLM reached the measuring host, that host's limits per command and per
session, its machine names) and no absolute path of the machines they were measured on.
A user reads such a passage as an instruction and cannot follow it. (scripts/README.md may
say how we carried vLLM; code comments in scripts/ and bench/ may too.)"""

from __future__ import annotations

import re

from tests.conftest import ROOT

# (pattern, what it gives away); case-insensitive
BANNED = [
    (r"\.device/", "the folder vLLM was carried in"),
    (r"unpack\.sh", "unpacking carried vLLM"),
    (r"shared/tools", "a folder beside the repository"),
    (r"vllm-h200/", "the carried vLLM build"),
    (r"\bdevice[- ]calls?\b", "the measuring host's calls"),
    (r"\bdevice time\b", "the measuring host's time budget"),
    (r"\bcarr(?:y|ied)\s*\[", "a carried folder"),
    (r"\(gitignored, carried\)", "a carried folder"),
    (r"ten[- ]minutes? (?:a|per) (?:command|call)", "the measuring host's limit"),
    (r"ten[- ]minute limit", "the measuring host's limit"),
    (r"commands? end(?:s)? after ten minutes", "the measuring host's limit"),
    (r"30 minutes of device|session's 30 minutes|its 30 minutes", "the measuring host's budget"),
    (r"(?:warm|idle) (?:for )?30 s|30 s after a call", "the measuring host going back"),
    (r"`nvidia-h(?:100|200)[-\w]*`", "the measuring host's machine kinds"),
    (r"(?<![\w~.-])/(?:work|root)/", "an absolute path of our machines"),
    (r"(?<![\w~.-])/tmp/(?!\*)", "an absolute temp path of our machines"),
]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_pages_are_found() -> None:
    assert len(PAGES) >= 10 and all(p.is_file() for p in PAGES)


def test_no_page_speaks_of_our_measuring_setup() -> None:
    found = []
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for pattern, why in BANNED:
                if re.search(pattern, line, re.IGNORECASE):
                    found.append(f"{page.relative_to(ROOT)}:{n}: {why}: {line.strip()[:120]}")
    assert not found, "\n".join(found)


def test_each_pattern_catches_what_it_is_for() -> None:
    # the passages the docs held before they were rewritten for users
    samples = [
        "the vLLM pieces that ../shared/tools/vllm-h200/ builds (gitignored, carried)",
        "    bash .device/unpack.sh && export PYTHONPATH=/tmp/vsite",
        "Device time: about 12 minutes in four calls",
        "(one device call, 223 s)",
        "    # device run, carry [\".gpu-eagle3\"], kind nvidia-h200-x2:",
        "device's ten-minute limit per command",
        "On the device we measured on, commands end after ten minutes",
        "most of a session's 30 minutes",
        "the machine stays warm 30 s after a call",
        "Measured 2026-12-02 on `nvidia-h200` (one H200, 16 cores)",
        "    python3 -m venv /work/vllm-venv",
        "    python -m bench.eagle3.campaign --out /tmp/co --workdir /tmp/h200",
    ]
    for text in samples:
        assert any(re.search(p, text, re.IGNORECASE) for p, _ in BANNED), text
    # and what users may read: their own paths, the H200 the figures were measured on
    for text in ["harness import ~/.gemini/tmp/eagle3/chats/session-1.jsonl",
                 "workdir: /data/eagle3", "measured 2026-12-02 on one H200 (16 cores)",
                 "`harness run examples/eagle3-h200.yaml` with your own vLLM"]:
        assert not any(re.search(p, text, re.IGNORECASE) for p, _ in BANNED), text
