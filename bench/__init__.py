"""changelake benchmarks: each measures changelake and a baseline in the same run and prints a ratio.

Run them with ``scripts/bench.sh`` (see ``bench/run.py`` for the options); results are recorded in
``bench/RESULTS.md``.
"""
