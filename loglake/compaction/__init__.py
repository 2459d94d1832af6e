"""Clean-up jobs of the tiered Delta tables: retention (cleanup.policy=delete), key compaction
(cleanup.policy=compact, with Spark), optimize (bin-packing), vacuum, and their scheduler.

Modules: common.py (cluster access, the one replace-commit path), retention.py, compact.py +
rewrite.py, optimize.py, vacuum.py, cli.py (``register(subparsers)`` for the ``loglake``
command, also runnable under spark-submit).
"""
