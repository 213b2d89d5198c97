"""The code as it was at a git revision, beside the code as it is, for benchmarks that
compare the two in one run (``--before REF``): `git archive` of REF into a temporary
directory, run with that directory first on PYTHONPATH.

The interpreter and its packages are this checkout's; only our own packages (`harness`,
`state`, `pipeline`, `tui`) come from the tree. A process started with ``python -m`` puts
its working directory first on sys.path, so such processes are started from the tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def export_tree(ref: str, dest: Path) -> Path:
    """Write revision ``ref`` of this repository into ``dest`` (made); returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True,
                                 capture_output=True).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"--before {ref}: {exc.stderr.decode(errors='replace').strip()}") \
            from None
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    # Compiled now, and the checkout's own code too: no run pays for it.
    compile_tree(dest)
    compile_tree(ROOT)
    return dest


def compile_tree(root: Path = ROOT) -> None:
    """Compile our packages under ``root`` to bytecode, as a run that may write
    ``__pycache__`` does on its first start (a machine with PYTHONDONTWRITEBYTECODE set
    would otherwise compile the changed modules on every start of the code as it is, and
    not those of the exported tree)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q",
                    *(str(root / name) for name in ("harness", "state", "pipeline", "tui"))],
                   check=True, capture_output=True)


def label(ref: str) -> str:
    """``main`` -> ``before (main)``, a hash shortened."""
    short = ref[:10] if len(ref) >= 20 and all(c in "0123456789abcdef" for c in ref) else ref
    return f"before ({short})"
