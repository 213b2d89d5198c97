"""A PostgreSQL URL in a Python without the postgres extra: one line naming the extra and
the missing driver, with the URL as that driver reads it, exit 3, for every route (psycopg2's everyday one, the engine's psycopg 3), and no traceback
from the error handler looking for the missing driver's error classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ROOT, harness_subprocess

HIDE = """\
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('psycopg2', 'psycopg', 'psycopg_binary', 'psycopg_c'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _Hide())
"""


@pytest.mark.parametrize("url", ["postgresql://me@127.0.0.1:1/campaign",
                                 "postgresql+psycopg://me@127.0.0.1:1/campaign",
                                 "postgresql://me@h1,h2/campaign"])
@pytest.mark.parametrize("args", [["db", "upgrade"], ["list"], ["todowrite"]])
def test_a_missing_driver_is_one_line_naming_the_extra(tmp_path: Path, url: str,
                                                       args: list[str]) -> None:
    (tmp_path / "sitecustomize.py").write_text(HIDE)
    proc = harness_subprocess(args, stdin=b'{"todos": []}',
                              env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "HARNESS_DB": url})
    err = proc.stderr.decode()
    assert proc.returncode == 3, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "pip install -e '.[postgres]'" in err
    # the URL printed names the driver the line names
    if "the PostgreSQL driver psycopg2 is not installed" in err:
        assert err.startswith("error: postgresql://me@"), err
    else:
        assert "the PostgreSQL driver psycopg 3 is not installed" in err, err
        assert err.startswith("error: postgresql+psycopg://me@"), err
