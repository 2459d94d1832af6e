"""The transaction coordinator: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions (Kafka's
``TransactionCoordinator`` and ``TransactionStateManager``).

**Ownership** (ownership.py): a transactional id belongs to one of 50 state partitions; each
partition's coordinator is the rendezvous choice over the live brokers. A broker that becomes
the choice (:meth:`TransactionCoordinator.run`'s ownership pass, or the first request for one of
its ids) *takes the partition over*: claims its ephemeral owner znode, bumps its coordinator
epoch, loads every id (catalog/transactions.py), then

* re-sends the markers of every id found in PrepareCommit/PrepareAbort and completes it
  (failover resume: a coordinator that died between writing PrepareCommit and CompleteCommit
  leaves exactly that behind);
* leaves Ongoing ones to the timeout pass, which aborts those past their timeout.

It stops owning a partition when the rendezvous choice moves, when its ZooKeeper lease ends
(SUSPENDED/LOST), when a conditioned write finds a newer coordinator epoch, or at shutdown: the
partition's ids are dropped from memory, its marker tasks cancelled, its owner znode released;
requests for its ids get NOT_COORDINATOR (clients look the coordinator up again). While a
partition we should own is being taken over (or its previous owner still holds it) requests
get COORDINATOR_LOAD_IN_PROGRESS.

**Requests.** Each id has an asyncio lock: one request (or timer action) decides and writes at a
time, the next one sees its result (state.py holds every decision). A transition is answered only
after its version-checked ZooKeeper write succeeded. EndTxn writes PrepareCommit /
PrepareAbort; the markers (markers.py) are then sent by a task of the partition, and
CompleteCommit/CompleteAbort is written when all are acknowledged. Meanwhile
AddPartitionsToTxn, AddOffsetsToTxn and InitProducerId answer CONCURRENT_TRANSACTIONS. Kafka
answers EndTxn as soon as the prepare is written; we answer when the transaction completed (at
most ``END_TXN_WAIT_S`` later, then as Kafka): a producer that committed then reads its own
records with read_committed, and its next transaction does not begin with
CONCURRENT_TRANSACTIONS retries (every client -- Java, librdkafka, aiokafka, kafka-python --
retries those on the next AddPartitionsToTxn, but after a 20-100 ms backoff per transaction,
while markers on a healthy cluster take milliseconds; every client's EndTxn timeout is far above
``END_TXN_WAIT_S``). The answer is the same either way (the decision is durable).
InitProducerId of a new producer instance while a transaction is Ongoing bumps the epoch (the
old instance is fenced), aborts that transaction, and answers CONCURRENT_TRANSACTIONS until the
abort completed (the client retries, then gets the next epoch).

**Timers** (:meth:`TransactionCoordinator.run`): the ownership pass every ``TICK_S``; every
``transaction.abort.timed.out.transaction.cleanup.interval.ms`` Ongoing transactions past their
``transaction.timeout.ms`` are aborted with an epoch bump (the producer is fenced, as in Kafka);
every ``transactional.id.expiration.check.interval.ms`` ids idle in Empty/CompleteCommit/
CompleteAbort for ``transactional.id.expiration.ms`` are deleted.

Crash points (loglake/faults.py): ``txn-after-prepare-commit`` and ``txn-after-prepare-abort``,
right after EndTxn's PrepareCommit/PrepareAbort is written, before any marker is sent;
``txn-between-markers``, when the first broker acknowledged the markers of an EndTxn (the
others may not be written yet; markers re-sent at takeover never reach it, so the next
coordinator survives it).

Runs on the broker's event loop (not thread-safe); ZooKeeper I/O through the session's executor.
Depends on the ZooKeeper session, the metadata cache, the config, a producer id allocator and
the marker sender only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from loglake.broker.metadata_cache import MetadataCache
from loglake.broker.metrics.transaction_metrics import LoadTimes
from loglake.broker.transactions.markers import (
    CoordinatorFencedError,
    MarkerOrder,
    MarkersAbandonedError,
    MarkerSender,
)
from loglake.broker.transactions.ownership import (
    STATE_PARTITIONS,
    coordinator_for_partition,
    state_partition_for,
)
from loglake.broker.transactions.state import (
    PREPARED,
    TransactionError,
    TransactionMetadata,
    TransactionState,
    complete,
    decide_add,
    decide_end,
    decide_init,
    expired,
    fence_and_abort,
    listed,
    new_metadata,
    rotate_producer_id,
    timed_out,
)
from loglake.broker.zk_session import ZkSession
from loglake.catalog.transactions import StaleTransactionStateError, TransactionStore
from loglake.catalog.zookeeper import CatalogClosedError
from loglake.config import BrokerConfig
from loglake.faults import crash_point

log = logging.getLogger(__name__)
TICK_S = 0.25
END_TXN_WAIT_S = 5.0
"""How long EndTxn waits for the markers before it answers anyway (the decision is durable
once PrepareCommit/PrepareAbort is written, which is when Kafka answers)."""
LOAD_WAIT_S = 5.0
"""How long a request waits for the takeover of its partition before COORDINATOR_LOAD_IN_
PROGRESS."""


@dataclass
class _Entry:
    meta: TransactionMetadata
    version: int  # of the id's znode


def _load_entries(store: TransactionStore, index: int) -> dict[str, _Entry]:
    """Every id of state partition ``index``, decoded (runs on the ZooKeeper executor)."""
    entries = {}
    for transactional_id, (raw, version) in store.load(index).items():
        try:
            entries[transactional_id] = _Entry(
                TransactionMetadata.decode(transactional_id, raw), version)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("transactional id %s: unreadable state %r (%s); ignored",
                        transactional_id, raw[:80], exc)
    return entries


@dataclass
class StatePartition:
    """One owned state partition: its coordinator epoch (and the epoch znode's version, the
    condition of our writes), its ids, the per-id locks and the running marker tasks."""

    index: int
    coordinator_epoch: int
    epoch_version: int
    entries: dict[str, _Entry] = field(default_factory=dict)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    tasks: set[asyncio.Future[None]] = field(default_factory=set)

    def lock(self, transactional_id: str) -> asyncio.Lock:
        return self.locks.setdefault(transactional_id, asyncio.Lock())


class TransactionCoordinator:
    def __init__(self, zk: ZkSession, metadata: MetadataCache, config: BrokerConfig, *,
                 allocate_producer_id: Callable[[], Awaitable[int]], markers: MarkerSender,
                 clock: Callable[[], float] = time.time) -> None:
        """``zk``: lease and the transaction store; ``metadata``: live brokers (ownership);
        ``config``: broker id, timeouts; ``allocate_producer_id``: a new producer id
        (producer_ids.py); ``markers``: sends WriteTxnMarkers; ``clock``: wall time in
        seconds (timeouts and expiration compare against it)."""
        self.zk = zk
        self.metadata = metadata
        self.config = config
        self.allocate_producer_id = allocate_producer_id
        self.markers = markers
        self.clock = clock
        self.store = zk.catalog.transaction_store()
        self.partitions: dict[int, StatePartition] = {}
        self._loading: dict[int, asyncio.Future[StatePartition | None]] = {}
        self._closed = False
        self.load_times = LoadTimes()  # state partition loads (broker/metrics/transaction_metrics)
        self.timed_out_aborts = 0

    @property
    def me(self) -> int:
        return self.config.broker_id

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------------ ownership
    def coordinator_for(self, transactional_id: str) -> int:
        """The broker coordinating ``transactional_id`` (FindCoordinator key type 1)."""
        return coordinator_for_partition(state_partition_for(transactional_id),
                                         self.metadata.live_brokers)

    def offsets_partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition whose marker completes ``group_id``'s offsets
        in a transaction."""
        return self.markers.offsets_partition_for(group_id)

    def _should_own(self, partition: int) -> bool:
        return (not self._closed and self.zk.healthy()
                and coordinator_for_partition(partition, self.metadata.live_brokers) == self.me)

    async def _owned(self, transactional_id: str) -> StatePartition:
        """The loaded partition of ``transactional_id``, taken over now if needed."""
        if not transactional_id:
            raise TransactionError(ErrorCode.invalid_request,
                                   "The transactional id must not be empty.")
        if not self.zk.healthy():
            raise TransactionError(ErrorCode.coordinator_not_available,
                                   "This broker has no live ZooKeeper session.")
        index = state_partition_for(transactional_id)
        if not self._should_own(index):
            raise TransactionError(
                ErrorCode.not_coordinator,
                f"Broker {self.me} is not the coordinator of transactional id "
                f"{transactional_id}.")
        part = self.partitions.get(index)
        if part is not None:
            return part
        try:
            part = await asyncio.wait_for(asyncio.shield(self._take_over_once(index)),
                                          LOAD_WAIT_S)
        except (TimeoutError, StaleTransactionStateError):
            part = None
        except Exception as exc:  # ZooKeeper unavailable: try again later
            raise TransactionError(ErrorCode.coordinator_not_available,
                                   f"Taking over state partition {index} failed: {exc!r}"
                                   ) from None
        if part is None:
            raise TransactionError(
                ErrorCode.coordinator_load_in_progress,
                f"Broker {self.me} is taking over the transactions of state partition "
                f"{index}.")
        return part

    def _take_over_once(self, index: int) -> asyncio.Future[StatePartition | None]:
        loading = self._loading.get(index)
        if loading is None:
            loading = asyncio.ensure_future(self._take_over(index))
            self._loading[index] = loading
            loading.add_done_callback(lambda _f: self._loading.pop(index, None))
        return loading

    async def _take_over(self, index: int) -> StatePartition | None:
        """Claim, bump the coordinator epoch, load; resume prepared transactions. None if the
        previous owner still holds the partition."""
        started = time.monotonic()
        if not await self.zk.call(self.store.claim, index, self.me):
            log.debug("transaction state partition %d is still held by its previous owner",
                      index)
            return None
        epoch, epoch_version = await self.zk.call(self.store.take_over, index, self.me)
        part = StatePartition(index, epoch, epoch_version)
        # read and decoded on the ZooKeeper executor: thousands of ids never stall the loop
        part.entries = await self.zk.call(_load_entries, self.store, index)
        if not self._should_own(index):
            with contextlib.suppress(Exception):
                await self.zk.call(self.store.release, index)
            return None
        self.partitions[index] = part
        self.load_times.record((time.monotonic() - started) * 1000)
        prepared = [e.meta for e in part.entries.values() if e.meta.state in PREPARED]
        log.log(logging.INFO if part.entries else logging.DEBUG,
                "coordinating transaction state partition %d (coordinator epoch %d): %d ids, "
                "%d to complete", index, epoch, len(part.entries), len(prepared))
        for meta in prepared:
            self._send_markers(part, meta)
        return part

    def _drop(self, index: int, reason: str) -> StatePartition | None:
        """Forget an owned partition (its marker tasks are cancelled)."""
        part = self.partitions.pop(index, None)
        if part is not None:
            for task in part.tasks:
                task.cancel()
            log.log(logging.INFO if part.entries else logging.DEBUG,
                    "no longer coordinating transaction state partition %d: %s", index, reason)
        return part

    async def _resign(self, index: int, reason: str) -> None:
        """:meth:`_drop` and release the owner znode (if ZooKeeper answers)."""
        if self._drop(index, reason) is not None:
            with contextlib.suppress(Exception):
                await self.zk.call(self.store.release, index)

    def _still_owned(self, part: StatePartition) -> bool:
        return self.partitions.get(part.index) is part and self._should_own(part.index)

    async def ownership_pass(self) -> None:
        """Drop what we no longer coordinate, take over (one at a time) what we should."""
        if not self.zk.healthy():
            for index in list(self.partitions):
                self._drop(index, "the ZooKeeper lease ended")
            return
        for index in list(self.partitions):
            if not self._should_own(index):
                await self._resign(index, "another broker is the coordinator now")
        for index in range(STATE_PARTITIONS):
            if index not in self.partitions and self._should_own(index):
                try:
                    await self._take_over_once(index)
                except StaleTransactionStateError:
                    continue
                except CatalogClosedError:
                    raise
                except Exception as exc:
                    log.warning("taking over transaction state partition %d failed: %r",
                                index, exc)
                    return

    async def shutdown(self) -> None:
        """Stop coordinating (broker shutdown): drop every partition, release the owners."""
        self._closed = True
        for index in list(self.partitions):
            await self._resign(index, "the broker stops")
        for loading in list(self._loading.values()):
            loading.cancel()
        await self.markers.close()

    # ------------------------------------------------------------------ writes
    async def _store(self, part: StatePartition, meta: TransactionMetadata,
                     version: int) -> None:
        """Write ``meta`` (version-checked, conditioned on our coordinator epoch), then keep it.
        A lost condition resigns the partition (NOT_COORDINATOR); an unknown outcome
        (ZooKeeper unavailable) drops it to be reloaded (COORDINATOR_NOT_AVAILABLE)."""
        if not self._still_owned(part):
            raise TransactionError(ErrorCode.not_coordinator,
                                   f"Broker {self.me} no longer coordinates "
                                   f"{meta.transactional_id}.")
        try:
            new_version = await self.zk.call(self.store.write, part.index,
                                             meta.transactional_id, meta.encode(), version,
                                             part.epoch_version)
        except StaleTransactionStateError as exc:
            await self._resign(part.index, str(exc))
            raise TransactionError(ErrorCode.not_coordinator, str(exc)) from None
        except Exception as exc:
            self._drop(part.index, f"a state write failed: {exc!r}")
            raise TransactionError(ErrorCode.coordinator_not_available,
                                   f"Writing the state of {meta.transactional_id} failed: "
                                   f"{exc!r}") from None
        if self.partitions.get(part.index) is not part:
            raise TransactionError(ErrorCode.not_coordinator,
                                   f"Broker {self.me} no longer coordinates "
                                   f"{meta.transactional_id}.")
        part.entries[meta.transactional_id] = _Entry(meta, new_version)

    def _send_markers(self, part: StatePartition, prepared: TransactionMetadata, *,
                      crash_at: str | None = None) -> asyncio.Future[None]:
        task = asyncio.ensure_future(self._complete(part, prepared, crash_at))
        part.tasks.add(task)
        task.add_done_callback(part.tasks.discard)
        return task

    async def _complete(self, part: StatePartition, prepared: TransactionMetadata,
                        crash_at: str | None = None) -> None:
        """Write the markers of a prepared transaction, then CompleteCommit/CompleteAbort."""
        order = MarkerOrder(prepared.producer_id, prepared.producer_epoch,
                            prepared.state is TransactionState.PREPARE_COMMIT,
                            part.coordinator_epoch, prepared.partitions, prepared.groups)
        try:
            await self.markers.send(order, still_owner=lambda: self._still_owned(part),
                                    crash_at=crash_at)
        except MarkersAbandonedError:
            return
        except CoordinatorFencedError as exc:
            await self._resign(part.index, str(exc))
            return
        except Exception:  # unexpected: the next takeover of the partition resumes it
            log.exception("sending the markers of %s failed", prepared.transactional_id)
            return
        async with part.lock(prepared.transactional_id):
            entry = part.entries.get(prepared.transactional_id)
            if entry is None or entry.meta != prepared or not self._still_owned(part):
                return
            try:
                await self._store(part, complete(prepared, now_ms=self._now_ms()), entry.version)
            except TransactionError as exc:
                log.info("completing %s: %s (the next coordinator completes it)",
                         prepared.transactional_id, exc)

    # ------------------------------------------------------------------ requests
    async def init_producer_id(self, transactional_id: str, *, timeout_ms: int,
                               producer_id: int = -1, producer_epoch: int = -1
                               ) -> tuple[int, int]:
        """InitProducerId with a transactional id: (producer id, epoch) or TransactionError.
        Checked in Kafka's order: an empty id (INVALID_REQUEST), the timeout
        (INVALID_TRANSACTION_TIMEOUT, even on a broker that does not coordinate the id), then
        ownership."""
        if not transactional_id:
            raise TransactionError(ErrorCode.invalid_request,
                                   "The transactional id must not be empty.")
        if timeout_ms <= 0 or timeout_ms > self.config.transaction_max_timeout_ms:
            raise TransactionError(
                ErrorCode.invalid_transaction_timeout,
                f"transaction.timeout.ms {timeout_ms} is not within 1.."
                f"{self.config.transaction_max_timeout_ms} (transaction.max.timeout.ms).")
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        part = await self._owned(transactional_id)
        async with part.lock(transactional_id):
            entry = part.entries.get(transactional_id)
            now = self._now_ms()
            if entry is None:
                meta = new_metadata(transactional_id, await self.allocate_producer_id(),
                                    timeout_ms, now)
                version = -1
            else:
                meta, version = entry.meta, entry.version
            decision = decide_init(meta, timeout_ms=timeout_ms, expected=expected, now_ms=now)
            new = decision.meta
            if decision.rotate:
                new = rotate_producer_id(meta, await self.allocate_producer_id(),
                                         timeout_ms=timeout_ms,
                                         record_last_epoch=expected is not None, now_ms=now)
            await self._store(part, new, version)
            if decision.fenced_abort:
                log.info("transactional id %s: a new producer fenced epoch %d; aborting its "
                         "open transaction", transactional_id, meta.producer_epoch)
                self._send_markers(part, new)
                raise TransactionError(
                    ErrorCode.concurrent_transactions,
                    f"Transactional id {transactional_id}: aborting the previous producer's "
                    f"transaction; retry.")
            return new.producer_id, new.producer_epoch

    async def _add(self, transactional_id: str, producer_id: int, epoch: int, *,
                   partitions: Iterable[tuple[str, int]] = (),
                   groups: Iterable[str] = ()) -> None:
        part = await self._owned(transactional_id)
        async with part.lock(transactional_id):
            entry = self._entry(part, transactional_id)
            new = decide_add(entry.meta, producer_id=producer_id, epoch=epoch,
                             partitions=partitions, groups=groups, now_ms=self._now_ms())
            if new is not None:
                await self._store(part, new, entry.version)

    async def add_partitions(self, transactional_id: str, *, producer_id: int, epoch: int,
                             partitions: Iterable[tuple[str, int]]) -> None:
        """AddPartitionsToTxn (v0-3, the client form)."""
        await self._add(transactional_id, producer_id, epoch, partitions=partitions)

    async def add_offsets(self, transactional_id: str, *, producer_id: int, epoch: int,
                          group_id: str) -> None:
        """AddOffsetsToTxn: the group's offsets commit or abort with the transaction."""
        await self._add(transactional_id, producer_id, epoch, groups=(group_id,))

    async def end_txn(self, transactional_id: str, *, producer_id: int, epoch: int,
                      commit: bool) -> None:
        """EndTxn: returns once the transaction completed, or at the latest
        ``END_TXN_WAIT_S`` after PrepareCommit/PrepareAbort was written (or at once when the
        same outcome already completed)."""
        part = await self._owned(transactional_id)
        async with part.lock(transactional_id):
            entry = self._entry(part, transactional_id)
            new = decide_end(entry.meta, producer_id=producer_id, epoch=epoch, commit=commit,
                             now_ms=self._now_ms())
            if new is None:
                return
            await self._store(part, new, entry.version)
            crash_point("txn-after-prepare-commit" if commit else "txn-after-prepare-abort")
            completion = self._send_markers(part, new, crash_at="txn-between-markers")
        await asyncio.wait({completion}, timeout=END_TXN_WAIT_S)

    @staticmethod
    def _entry(part: StatePartition, transactional_id: str) -> _Entry:
        entry = part.entries.get(transactional_id)
        if entry is None:
            raise TransactionError(
                ErrorCode.invalid_producer_id_mapping,
                f"Transactional id {transactional_id} has no producer id: call "
                f"InitProducerId first.")
        return entry

    async def describe(self, transactional_id: str) -> TransactionMetadata:
        """DescribeTransactions of one id (TRANSACTIONAL_ID_NOT_FOUND if unknown)."""
        part = await self._owned(transactional_id)
        entry = part.entries.get(transactional_id)
        if entry is None or entry.meta.state is TransactionState.DEAD:
            raise TransactionError(ErrorCode.transactional_id_not_found,
                                   f"Transactional id {transactional_id} is not known.")
        return entry.meta

    def list_transactions(self, *, states: frozenset[TransactionState],
                          producer_ids: frozenset[int],
                          min_duration_ms: int = -1) -> list[TransactionMetadata]:
        """ListTransactions: the ids this broker coordinates that pass the filters.
        COORDINATOR_NOT_AVAILABLE without a ZooKeeper lease (Kafka: an inactive coordinator)
        and COORDINATOR_LOAD_IN_PROGRESS while a state partition is being loaded (Kafka's
        ``loadingPartitions``), rather than a list missing that partition's ids; both are
        retriable."""
        if not self.zk.healthy():
            raise TransactionError(ErrorCode.coordinator_not_available,
                                   "This broker has no live ZooKeeper session.")
        if self._loading:
            raise TransactionError(
                ErrorCode.coordinator_load_in_progress,
                f"Broker {self.me} is loading transaction state partition(s) "
                f"{sorted(self._loading)}.")
        now = self._now_ms()
        return [entry.meta for part in list(self.partitions.values())
                for entry in list(part.entries.values())
                if listed(entry.meta, states=states, producer_ids=producer_ids,
                          min_duration_ms=min_duration_ms, now_ms=now)]

    def state_counts(self) -> dict[str, int]:
        """Transactional ids coordinated here per state (Kafka's names), for the metrics."""
        counts: dict[str, int] = {}
        for part in self.partitions.values():
            for entry in part.entries.values():
                counts[entry.meta.state.value] = counts.get(entry.meta.state.value, 0) + 1
        return counts

    # ------------------------------------------------------------------ timers
    async def abort_timed_out(self) -> int:
        """Abort (epoch bump, fencing the producer) every Ongoing transaction past its
        timeout; returns how many were started."""
        aborted = 0
        for part in list(self.partitions.values()):
            for transactional_id, entry in list(part.entries.items()):
                if not timed_out(entry.meta, self._now_ms()):
                    continue
                async with part.lock(transactional_id):
                    current = part.entries.get(transactional_id)
                    now = self._now_ms()
                    if current is None or not timed_out(current.meta, now) \
                            or not self._still_owned(part):
                        continue
                    try:
                        new = fence_and_abort(current.meta, now_ms=now)
                        await self._store(part, new, current.version)
                    except TransactionError as exc:
                        log.info("aborting timed-out %s: %s", transactional_id, exc)
                        continue
                    log.info("transactional id %s: transaction open for more than %d ms "
                             "aborted (producer epoch %d fenced)", transactional_id,
                             current.meta.timeout_ms, current.meta.producer_epoch)
                    self._send_markers(part, new)
                    aborted += 1
                    self.timed_out_aborts += 1
        return aborted

    async def expire_ids(self) -> int:
        """Delete ids idle for ``transactional.id.expiration.ms``; returns how many."""
        expiration = self.config.transactional_id_expiration_ms
        removed = 0
        for part in list(self.partitions.values()):
            for transactional_id, entry in list(part.entries.items()):
                if not expired(entry.meta, self._now_ms(), expiration):
                    continue
                async with part.lock(transactional_id):
                    current = part.entries.get(transactional_id)
                    if current is None or not expired(current.meta, self._now_ms(), expiration) \
                            or not self._still_owned(part):
                        continue
                    try:
                        await self.zk.call(self.store.delete, part.index, transactional_id,
                                           current.version, part.epoch_version)
                    except StaleTransactionStateError as exc:
                        await self._resign(part.index, str(exc))
                        break
                    except Exception:
                        log.exception("expiring transactional id %s failed", transactional_id)
                        continue
                    part.entries.pop(transactional_id, None)
                    part.locks.pop(transactional_id, None)
                    removed += 1
                    log.info("transactional id %s expired", transactional_id)
        return removed

    async def run(self) -> None:
        """The ownership pass every TICK_S, timeouts and expiration at their intervals; until
        cancelled."""
        last_abort = last_expiry = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.ownership_pass()
                now = time.monotonic()
                interval = self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
                if now - last_abort >= interval / 1000:
                    last_abort = now
                    await self.abort_timed_out()
                check = self.config.transactional_id_expiration_check_interval_ms
                if now - last_expiry >= check / 1000:
                    last_expiry = now
                    await self.expire_ids()
            except asyncio.CancelledError:
                raise
            except CatalogClosedError:
                return
            except Exception:
                log.exception("transaction coordinator pass failed")
