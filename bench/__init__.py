"""Benchmarks: each module measures one thing and prints its table (docs/PERFORMANCE.md).

Run them as modules from the repository root, with the project installed::

    pip install -e '.[eagle3,dev]'
    python -m bench.ui.cli_latency --help

The benches sit in part folders named for what they measure: ``agents/`` (what the harness
costs an agent), ``store/`` (the store under load), ``ui/`` (what a person waits for),
``hosts/`` (SSH), ``eagle3/`` (the stages on a GPU) and ``serving/`` (served benchmarks).
The modules at the top are what several benches share: ``dbarg`` (``--db``/``--pg``),
``process_timing`` (timing fresh processes) and ``before_tree`` (``--before REF``).

Our own packages (``harness``, ``pipeline``, ``state``, ``tui``) come from the install.
``bench.*`` (a bench's siblings, e.g. ``bench.process_timing``) and ``tests.*`` (the stand-in
servers and agent projects some benches drive) are not installed: they resolve because
``python -m`` puts the working directory, the repository root, first on ``sys.path``. No
bench adds to ``sys.path`` itself (tests/test_bench_imports.py holds that).

bench/serving/vllm_bench_driver.py is the exception: bench/serving/served_reference.py runs
it by path in vLLM's interpreter, so it imports nothing of this project.
"""
