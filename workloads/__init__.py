"""Worker side of collbench: the worker class, the harness and one module per collective.

Nothing here knows about Ray placement or planning; the driver (``orchestrator``) creates
``BenchWorker`` actors and hands them plain dictionaries.
"""
