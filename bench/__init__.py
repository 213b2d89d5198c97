"""Benchmarks: each module measures one thing and prints its table (docs/PERFORMANCE.md).

Run them as modules from the repository root, with the project installed::

    pip install -e '.[eagle3,dev]'
    python -m bench.cli_latency --help

Our own packages (``harness``, ``pipeline``, ``state``, ``tui``) come from the install.
``bench.*`` (a bench's siblings, e.g. ``bench.process_timing``) and ``tests.*`` (the stand-in
servers and agent projects some benches drive) are not installed: they resolve because
``python -m`` puts the working directory, the repository root, first on ``sys.path``. No
bench adds to ``sys.path`` itself (tests/test_bench_imports.py holds that).

bench/vllm_bench_driver.py is the exception: bench/served_reference.py runs it by path in
vLLM's interpreter, so it imports nothing of this project.
"""
