"""Benchmarks: scripts that print figures against a baseline measured in the same run.

Run each as a module from the repository root (``.venv/bin/python -m benchmarks.chaos``); how to run and
read each is in ``benchmarks/README.md``, measured figures in ``benchmarks/results/``. The harnesses they
share with the tests live in ``tests.harness``.
"""
