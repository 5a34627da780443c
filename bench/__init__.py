"""Benchmarks: `python -m bench NAME` runs bench/NAME_bench.py (see __main__.py)."""
