"""Small helpers shared by tests: create topics with confluent-kafka's AdminClient."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=10, request_timeout=15,
    )
    futures[name].result(timeout=20)
