"""The harnesses the tests and the benchmarks share, imported normally by both (``tests.harness.X``).

- ``standalone``: ``airflow standalone`` in a private home with the emulator as a process (the standalone
  suite, ``benchmarks.standalone_triggerer``);
- ``deployment``: the production-shaped deployment of ``tests/deployment/deploy.sh`` (the deployment suite,
  ``benchmarks.deployment``);
- ``chaos``: N tasks through ``dag.test()`` under seeded faults (the chaos tests, ``benchmarks.chaos``);
- ``real_slurm``: the real-Slurm test cluster's REST calls, recordings and controls (tests/real_slurm);
- ``emulator``: raw ``callSlurmRestApi`` calls over google-auth and shape checks (tests/emulator and the
  real-Slurm conformance suite);
- ``storage``: fake-gcs-server (a real Cloud Storage emulator from PyPI) behind a proxy that can answer 503
  (the ``fake_gcs`` fixture; the staging tests).

Benchmarks run as modules from the repository root (``python -m benchmarks.chaos``); tests through pytest,
whose ``pythonpath`` is the repository root. Nothing here imports a benchmark.
"""
