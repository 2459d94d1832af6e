"""The transaction coordinator (Kafka's ``TransactionCoordinator``): per transactional id state
(state.py), which broker coordinates which id (ownership.py), the markers it sends to partition
leaders and group coordinators (markers.py) and the coordinator itself (coordinator.py)."""
