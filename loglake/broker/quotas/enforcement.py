"""Enforcing client quotas around a request handler, as Kafka's ``KafkaApis`` and
``RequestHandlerHelper`` do (KIP-219: answer at once with ``throttle_time_ms``, then mute the
channel).

broker/server.py calls :func:`handle_with_quotas` instead of the handler once any quota exists
(``ClientQuotas.enabled``), and :func:`wait_if_muted` after writing each response. For one
request of user U (the session principal's name) and client id C:

* **Request time** (every API but the exempt ones below): the handler's time on the event loop
  (the sum of its steps between awaits, so time spent waiting, e.g. a long poll or acks=all, is
  not counted: Kafka counts its request thread's time, not purgatory waits) is recorded as a
  percentage of one thread against ``request_percentage`` (Kafka:
  ``ClientRequestQuotaManager``).
* **Produce**: the request's size in bytes against ``producer_byte_rate``; acks=0 records no
  request time (Kafka exempts it) but is still muted when over its byte rate (it gets no
  response to carry the throttle time).
* **Fetch** (consumers; a follower's fetch, ``replica_id`` >= 0, is exempt, replication has its
  own quotas): before the handler, ``max_bytes`` is capped at what the quota window allows
  (Kafka's ``getMaxValueInQuotaWindow``) so one fetch cannot be throttled for certain; after it,
  the response's record bytes against ``consumer_byte_rate``. A throttled fetch (by bytes or by
  request time) is answered **without data**: no partitions, error NONE, session 0 (Kafka's
  ``FetchContext.getThrottledResponse`` for its sessionless context; loglake never creates
  fetch sessions), and its bytes are un-recorded: the consumer fetches them again after the
  throttle.
* **Throttle**: the larger of the byte-rate and request-time throttles; when positive the
  response's ``throttle_time_ms`` carries it and the connection is muted (its next request is
  not read) for that long after the response is written (``Session.muted_until``). Kafka 2.0+
  clients also wait on their side for responses of the KIP-219 versions; older ones are held
  back by the mute alone.

Controller mutations (KIP-599, controller_mutation.py): the topic admin handlers take a
:func:`controller_mutation_quota`, record each topic's partitions in it and answer through
:func:`with_mutation_throttle`; the request-time throttle above replaces that throttle time
only when larger.

Exempt (Kafka's ``sendResponseExemptThrottle``): cluster actions (WriteTxnMarkers, follower
fetches) and the requests of sessions that have not authenticated yet (Kafka's authenticator
answers them before ``KafkaApis``).

Event loop only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from kio.static.primitive import i32Timedelta

from loglake.broker.quotas.controller_mutation import UNBOUNDED, MutationQuota
from loglake.broker.quotas.manager import ClientQuotas

if TYPE_CHECKING:
    from loglake.broker.codec import RequestFrame
    from loglake.broker.security.session import Session

PRODUCE_KEY = 0
FETCH_KEY = 1
EXEMPT_KEYS = frozenset({27})
"""Cluster actions (Kafka's ``ApiKeys.clusterAction``) served here: WriteTxnMarkers."""
PERCENT_PER_SECOND = 100.0
"""Kafka's ``NanosToPercentagePerSecond`` in seconds: 1 s of handler time = 100 %."""
FETCH_PARTITION_OVERHEAD = 40
"""Bytes a fetch response spends per partition besides its records (index, error,
offsets), counted with the records as the response size."""

T = TypeVar("T")
Handler = Callable[[Any, "RequestFrame"], Awaitable[Any]]


class _Timed:
    """Await a coroutine and add up the time of its steps (see the module docstring)."""

    __slots__ = ("_coro", "busy_s")

    def __init__(self, coro: Any) -> None:
        self._coro = coro
        self.busy_s = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        value: Any = None
        error: BaseException | None = None
        clock = time.perf_counter
        while True:
            started = clock()
            try:
                yielded = coro.send(value) if error is None else coro.throw(error)
            except StopIteration as stop:
                self.busy_s += clock() - started
                return stop.value
            except BaseException:
                self.busy_s += clock() - started
                raise
            self.busy_s += clock() - started
            try:
                value = yield yielded
                error = None
            except BaseException as exc:  # cancellation or close: hand it to the handler
                value, error = None, exc


def _session_user(frame: RequestFrame) -> str:
    return frame.session.principal.name


def _exempt(frame: RequestFrame) -> bool:
    if frame.api_key in EXEMPT_KEYS or not frame.session.authenticated:
        return True
    return frame.api_key == FETCH_KEY and getattr(frame.body, "replica_id", -1) >= 0


async def handle_with_quotas(quotas: ClientQuotas, handler: Handler, services: Any,
                             frame: RequestFrame, request_size: int) -> Any:
    """Run ``handler`` for ``frame`` with the quotas applied (see the module docstring);
    returns the response body (None: no response), with ``throttle_time`` set when
    throttled; mutes the session when throttled."""
    if _exempt(frame):
        return await handler(services, frame)
    user = _session_user(frame)
    client_id = frame.client_id or ""
    api_key = frame.api_key
    if api_key == FETCH_KEY:
        frame = _cap_fetch(quotas, frame, user, client_id)
    timed = _Timed(handler(services, frame))
    body = await timed
    now_ms = quotas.clock_ms()
    acks_zero = api_key == PRODUCE_KEY and getattr(frame.body, "acks", 1) == 0
    request_throttle = 0
    if quotas.request.enabled and not acks_zero:
        request_throttle = quotas.request.record(user, client_id,
                                                 timed.busy_s * PERCENT_PER_SECOND, now_ms)
    bandwidth_throttle = 0
    if api_key == PRODUCE_KEY:
        bandwidth_throttle = quotas.produce.record(user, client_id, request_size, now_ms)
    elif api_key == FETCH_KEY and quotas.fetch.enabled and body is not None:
        size = fetch_response_size(body)
        bandwidth_throttle = quotas.fetch.record(user, client_id, size, now_ms)
        if max(bandwidth_throttle, request_throttle) > 0:
            quotas.fetch.unrecord(user, client_id, size, now_ms)
            body = throttled_fetch_response(body)
    throttle_ms = max(bandwidth_throttle, request_throttle)
    if throttle_ms > 0:
        mute(frame.session, throttle_ms)
        if body is not None and hasattr(body, "throttle_time"):
            # a controller mutation throttle the handler set stays when larger (Kafka's
            # sendResponseMaybeThrottleWithControllerQuota takes the larger of the two)
            set_ms = int(body.throttle_time.total_seconds() * 1000)
            if throttle_ms > set_ms:
                body = dataclasses.replace(body, throttle_time=throttle_time(throttle_ms))
    return body


def _cap_fetch(quotas: ClientQuotas, frame: RequestFrame, user: str,
               client_id: str) -> RequestFrame:
    cap = quotas.fetch.max_value_in_window(user, client_id)
    request = frame.body
    max_bytes = getattr(request, "max_bytes", None)
    if cap is None or max_bytes is None or max_bytes <= cap:
        return frame
    limit = max(int(cap), 1)
    capped = dataclasses.replace(request, max_bytes=type(max_bytes)(limit),
                                 min_bytes=type(request.min_bytes)(min(request.min_bytes,
                                                                       limit)))
    return dataclasses.replace(frame, body=capped)


def fetch_response_size(body: Any) -> int:
    """The bytes a fetch response carries: its records plus a per-partition overhead."""
    size = 0
    for topic in body.responses:
        for partition in topic.partitions:
            records = partition.records
            size += FETCH_PARTITION_OVERHEAD + (len(records) if records is not None else 0)
    return size


def throttled_fetch_response(body: Any) -> Any:
    """The answer of a throttled fetch: no partitions (see the module docstring)."""
    changes: dict[str, Any] = {"responses": ()}
    if hasattr(body, "session_id"):
        changes["session_id"] = type(body.session_id)(0)
    return dataclasses.replace(body, **changes)


def throttle_time(throttle_ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms))


def controller_mutation_quota(quotas: ClientQuotas, frame: RequestFrame) -> MutationQuota:
    """The KIP-599 quota of a CreateTopics/CreatePartitions/DeleteTopics request (strict from
    the API's KIP-599 version); unbounded for unauthenticated sessions (never served) and
    while no entity has ``controller_mutation_rate``."""
    manager = quotas.controller_mutation
    if not manager.enabled or not frame.session.authenticated:
        return UNBOUNDED
    return manager.quota_for(_session_user(frame), frame.client_id or "", frame.api_key,
                             frame.api_version)


def with_mutation_throttle(quota: MutationQuota, frame: RequestFrame, body: Any) -> Any:
    """The response with the controller mutation throttle time (when positive) in
    ``throttle_time_ms`` and the connection muted that long (Kafka's
    ``sendResponseMaybeThrottleWithControllerQuota``)."""
    throttle_ms = quota.throttle_ms()
    if throttle_ms <= 0:
        return body
    mute(frame.session, throttle_ms)
    if hasattr(body, "throttle_time"):
        body = dataclasses.replace(body, throttle_time=throttle_time(throttle_ms))
    return body


def mute(session: Session, throttle_ms: int) -> None:
    """Mute ``session``'s connection for ``throttle_ms`` from now (a longer mute already set
    stays)."""
    until = time.monotonic() + throttle_ms / 1000.0
    session.muted_until = max(session.muted_until, until)


async def wait_if_muted(session: Session) -> None:
    """Called by the server after a response is written: wait out the connection's mute."""
    delay = session.muted_until - time.monotonic()
    session.muted_until = 0.0
    if delay > 0:
        await asyncio.sleep(delay)
