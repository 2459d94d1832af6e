"""The timed produce loop shared by the benchmarks: ``total`` copies of one payload through a
confluent-kafka producer, timed from the first ``produce`` to the completed flush, with broker
CPU measured over the same span. Bounded by ``phase_timeout``; progress every chunk."""

from __future__ import annotations

import time
from collections.abc import Sequence

from confluent_kafka import KafkaError, Producer
from measure import BenchmarkError, PhaseResult, Progress, total_cpu_seconds

PRODUCE_CHUNK = 10_000
"""Records produced between two checks of the clock (progress, deadline, poll)."""
ADMIN_TIMEOUT_S = 30.0


def timed_produce(settings: dict[str, object], topic: str, payload: bytes, total: int, *,
                  label: str, pids: Sequence[int], phase_timeout: float,
                  partitions: int | None = None) -> PhaseResult:
    """Produce ``total`` copies of ``payload`` to ``topic``.

    With ``partitions``, chunk *i* of ``PRODUCE_CHUNK`` records goes to partition ``i %
    partitions``; without, the client's partitioner chooses. Raises BenchmarkError on any
    delivery error, a full local queue or an unfinished flush past the deadline.
    """
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({**settings, "on_delivery": on_delivery})
    producer.list_topics(topic, timeout=ADMIN_TIMEOUT_S)  # connect + metadata, not timed
    produce, poll = producer.produce, producer.poll
    progress = Progress(label, total)
    cpu_before = total_cpu_seconds(pids)
    started = time.perf_counter()
    deadline = started + phase_timeout
    sent = 0
    chunk_index = 0
    while sent < total:
        chunk = min(PRODUCE_CHUNK, total - sent)
        # -1 is librdkafka's "unassigned": the client's partitioner picks
        partition = -1 if partitions is None else chunk_index % partitions
        for _ in range(chunk):
            try:
                produce(topic, payload, partition=partition)
            except BufferError:  # local queue full: serve it, bounded by the deadline
                while True:
                    poll(0.01)
                    try:
                        produce(topic, payload, partition=partition)
                        break
                    except BufferError:
                        if time.perf_counter() > deadline:
                            raise BenchmarkError("produce queue stayed full until the "
                                                 "deadline") from None
        sent += chunk
        chunk_index += 1
        poll(0)
        progress.update(sent - len(producer))
        if time.perf_counter() > deadline or errors:
            break
    while (remaining := producer.flush(1.0)) > 0 and not errors:
        progress.update(sent - remaining)
        if time.perf_counter() > deadline:
            raise BenchmarkError(f"flush: {remaining} records undelivered after "
                                 f"{phase_timeout:g} s")
    elapsed = time.perf_counter() - started
    cpu = total_cpu_seconds(pids) - cpu_before
    progress.update(sent, force=True)
    if errors:
        raise BenchmarkError(f"{len(errors)} delivery errors, first: {errors[0]}")
    if sent != total:
        raise BenchmarkError(f"produced {sent} of {total} records within "
                             f"{phase_timeout:g} s")
    return PhaseResult(total, total * len(payload), elapsed, cpu)
