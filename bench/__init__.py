"""Benchmarks of memesh: they start a real server, print figures beside a baseline
measured in the same run, and never assert. See ``docs/benchmarks.md``.

Run everything with ``.venv/bin/python -m bench.run_all`` (add ``--quick`` for a
smoke run), or one module with ``-m bench.retrieval`` / ``-m bench.writes``.
"""
