"""``vllm bench serve``, run several times from one process, for bench/serving/served_reference.py.

Runs in vLLM's own interpreter and imports nothing of this project: it is started by
path (not as ``bench.serving.vllm_bench_driver``), where neither the project nor the repository
is on sys.path (tests/test_bench_imports.py holds it to that). Each line on stdin is
a JSON list of ``vllm bench serve`` arguments; each is parsed by the parser vLLM's CLI
builds for that subcommand (``vllm.benchmarks.serve.add_cli_args`` on vLLM's
``FlexibleArgumentParser``) and run by the function the subcommand runs
(``vllm.benchmarks.serve.main``): what ``python -m vllm.entrypoints.cli.main bench serve
ARGS`` does, without importing vLLM again for every run (about 20 s each on the H200). After
each run it prints ``@@done <exit status>`` on a line of its own.

    PYTHON bench/serving/vllm_bench_driver.py < runs.jsonl
"""

from __future__ import annotations

import json
import sys
import traceback


def main() -> int:
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    print("@@ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        status = 0
        try:
            parser = FlexibleArgumentParser(prog="vllm bench serve")
            add_cli_args(parser)
            bench_serve(parser.parse_args(json.loads(line)))
        except SystemExit as exc:  # argparse refused the arguments
            status = exc.code if isinstance(exc.code, int) else 2
        except Exception:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"@@done {status}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
