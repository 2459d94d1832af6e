"""The broker process: network layer, request handlers, replica manager and partitions,
controller, group coordinator, tiering, and the ZooKeeper session they share.

Layer map, threads and executors, and where each Kafka concept lives: docs/ARCHITECTURE.md.
Entry point: :mod:`loglake.broker.main`; wiring and lifecycle: :mod:`loglake.broker.broker`.
"""
