"""Delayed operations (Kafka's purgatories): an acks=all produce waiting for replication and a
fetch long-polling for data.

Both wait on :meth:`Partition.waiter`, a future the partition completes at every change that
can decide them: an append, a high-watermark move, a log-start move, losing leadership, close.
A woken operation re-checks its condition and waits again with what is left of its time, so a
spurious wake-up costs one check and a missed one cannot happen (the waiter is registered
before the caller yields to the event loop).

* **Delayed produce** (:func:`await_replication`): completes when the high watermark passes the
  appended batch's last offset (every ISR member has it); then fails with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below ``min.insync.replicas`` meanwhile.
  Fails with NOT_LEADER_OR_FOLLOWER as soon as this replica stops leading (or is closed), and
  with REQUEST_TIMED_OUT at the request's timeout. The decision is the pure predicate
  :func:`replication_done`.
* **Delayed fetch** (:func:`await_change`): the fetch path re-reads its partitions after any
  of them changes or after the remaining wait (see ``ReplicaManager.fetch_messages``). A
  read_committed fetch waits on the same wake-ups: its bound, the last stable offset, moves
  only when a marker is appended or the high watermark moves, and both wake the waiters.

Thread-safety: event-loop thread only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from loglake.broker.metrics.request_timing import remote_begin, remote_end
from loglake.broker.partition import Partition, Role
from loglake.errors import NotEnoughReplicasAfterAppendError, NotLeaderError, RequestTimedOutError


def replication_done(partition: Partition, last_offset: int, min_isr: int) -> bool:
    """Whether an acks=all write ending at ``last_offset`` is decided: True when the high
    watermark has passed it (NotEnoughReplicasAfterAppendError if the ISR is now below
    ``min_isr``), False while it has not; NotLeaderError once this replica no longer leads."""
    if partition.high_watermark <= last_offset:
        if partition.closed or partition.role is not Role.LEADER:
            raise NotLeaderError(
                f"Broker {partition.broker_id} lost leadership of {partition.name} before the "
                "write was replicated."
            )
        return False
    if len(partition.isr) < min_isr:
        raise NotEnoughReplicasAfterAppendError(
            f"{partition.name}: the ISR shrank to {list(partition.isr)} below "
            f"min.insync.replicas {min_isr} after the append."
        )
    return True


async def await_replication(partition: Partition, last_offset: int, min_isr: int,
                            timeout: float) -> None:
    """The delayed produce of one partition (see the module): returns once replicated, raises
    RequestTimedOutError, NotEnoughReplicasAfterAppendError or NotLeaderError."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not replication_done(partition, last_offset, min_isr):
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise RequestTimedOutError(
                f"{partition.name}: offset {last_offset} was not replicated to the ISR "
                f"{list(partition.isr)} within {timeout:g} s."
            )
        await await_change([partition], remaining)


async def await_change(partitions: Iterable[Partition], timeout: float) -> None:
    """Wait until any of ``partitions`` changes (see the module) or ``timeout`` seconds pass."""
    waiters = [partition.waiter() for partition in partitions]
    if not waiters:
        return
    remote = remote_begin()  # the request's remote time (broker/metrics/request_timing.py)
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        remote_end(remote)
        for waiter in waiters:
            waiter.cancel()
