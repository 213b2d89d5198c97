"""Write docs/cli.md from the CLI's own --help texts, so the reference cannot drift.

    python scripts/gen_cli_docs.py          # rewrite docs/cli.md
    python scripts/gen_cli_docs.py --check  # exit 1 if docs/cli.md is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.cli.main import cli  # noqa: E402

OUT = ROOT / "docs" / "cli.md"


def walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    found = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.list_commands(click.Context(cmd))):
            sub = cmd.get_command(click.Context(cmd), name)
            if sub is not None and not sub.hidden:
                found += walk(sub, [*path, name])
    return found


# Pictures shown under a command's help (made by scripts/report_screenshot.py from the
# README's main job).
PICTURES = {
    "harness plot": ("`harness plot train loss heldout_acc` after the README's main job",
                     "plot.png"),
    "harness report": ("`harness report --html` of the README's main job, in Chromium",
                       "report.png"),
}


def render() -> str:
    parts = ["# Command reference", "",
             "Generated from `harness --help` by `scripts/gen_cli_docs.py`; do not edit by hand.",
             ""]
    for path, cmd in walk(cli, ["harness"]):
        name = " ".join(path)
        ctx = click.Context(cmd, info_name=name, terminal_width=100)
        parts += [f"## `{name}`", "", "```text", cmd.get_help(ctx).rstrip(), "```", ""]
        if name in PICTURES:
            alt, path = PICTURES[name]
            parts += [f"![{alt}]({path})", ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/gen_cli_docs.py",
        description="Write docs/cli.md from the CLI's own --help texts (rerun it after "
                    "changing a command's help).")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if docs/cli.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is stale: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
