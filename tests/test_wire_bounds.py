"""The request bounds check (loglake/broker/request_bounds.py): every advertised API version is
covered, valid requests pass and agree with kio's reader byte for byte, and lengths, counts and
varints that cannot fit are refused with FrameError before kio allocates anything.

A regression here would not fail an assertion: it would abort the interpreter (kio's native
reader reserves the declared count before reading). Every test that hands a hostile frame to
``decode_request`` therefore runs in a child interpreter (:func:`_run_isolated`), so an abort
fails that test instead of killing pytest; tests that only call the pure-Python checker run
in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from loglake.broker.codec import FrameError, decode_request, request_class
from loglake.broker.request_bounds import (
    MAX_REQUEST_ELEMENTS,
    check_request,
    entity_checker,
    min_size,
)
from loglake.broker.request_memory import RequestMemory, RequestMemoryExhausted
from loglake.config import BrokerConfig
from loglake.errors import InvalidConfigError
from tests.request_strategies import (
    SUPPORTED,
    damaged_frames,
    encode_frame,
    encode_uvarint,
    out_of_range_frames,
    valid_frames,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = bytes.fromhex("0003000c00000007000466757a7a00ffffffff0f")  # Metadata v12, 2**32-2 topics


def _run_isolated(code: str, timeout: float = 240.0) -> str:
    """Run ``code`` in a fresh interpreter at the repository root; fail on a non-zero exit
    (an abort is exit status -6/134) with its output, return its stdout."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, (
        f"child exited with {result.returncode}\nstdout:\n{result.stdout[-4000:]}\n"
        f"stderr:\n{result.stderr[-4000:]}")
    return result.stdout


def _checks(frame: bytes, api_key: int, version: int) -> bool:
    cls: Any = request_class(api_key, version)
    return check_request(frame, cls.__header_schema__, cls)


def _header(api_key: int, version: int) -> bytes:
    """Request header v1 (also the start of v2 minus its tagged fields): empty client id."""
    return struct.pack(">hhih", api_key, version, 7, 0)


# --------------------------------------------------------------------------------------------
# the reported frame


def test_example_frame_is_refused_not_aborted() -> None:
    out = _run_isolated(f"""
        from loglake.broker.codec import FrameError, decode_request
        try:
            decode_request(bytes.fromhex({EXAMPLE.hex()!r}), 3, 12)
        except FrameError as exc:
            print("refused:", exc)
    """)
    assert "refused: MetadataRequest.topics: array of 4294967294 elements" in out


def test_example_frame_check_in_process() -> None:
    with pytest.raises(FrameError, match="4294967294 elements"):
        _checks(EXAMPLE, 3, 12)


# --------------------------------------------------------------------------------------------
# coverage and agreement with kio


@pytest.mark.parametrize(("api_key", "version"), SUPPORTED)
def test_every_advertised_version_has_a_checker(api_key: int, version: int) -> None:
    cls: Any = request_class(api_key, version)
    entity_checker(cls.__header_schema__)
    entity_checker(cls)
    assert min_size(cls) >= (1 if cls.__flexible__ else 0)


@settings(max_examples=400, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(case=valid_frames())
def test_valid_requests_pass_and_end_where_kio_ends(case: tuple[int, int, bytes]) -> None:
    api_key, version, frame = case
    cls: Any = request_class(api_key, version)
    state = [MAX_REQUEST_ELEMENTS, False]
    header_end = entity_checker(cls.__header_schema__)(frame, 0, len(frame), state)
    body_end = entity_checker(cls)(frame, header_end, len(frame), state)
    _header_entity, header_size = entity_reader(cls.__header_schema__)(frame, 0)
    _body, body_size = entity_reader(cls)(frame, header_size)
    assert (header_end, body_end) == (header_size, header_size + body_size) == (
        header_end, len(frame))
    assert state[1] is False  # kio wrote no tagged field we do not know
    decode_request(frame, api_key, version)


# --------------------------------------------------------------------------------------------
# hostile frames: property tests in a child interpreter


def run_out_of_range(max_examples: int) -> None:
    """Every frame with a length/count/varint out of range is refused by the check, and
    ``decode_request`` never gets past it or aborts."""
    seen: dict[str, int] = {}

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=out_of_range_frames())
    def prop(case: tuple[int, int, bytes, str]) -> None:
        api_key, version, frame, what = case
        seen[what.split(" ")[0]] = seen.get(what.split(" ")[0], 0) + 1
        with pytest.raises(FrameError):
            _checks(frame, api_key, version)
        with contextlib.suppress(FrameError):
            decode_request(frame, api_key, version)

    prop()
    print("roles", sorted(seen.items()))


def run_damaged(max_examples: int) -> None:
    """Truncated, spliced and bit-flipped frames decode or raise FrameError; nothing else."""

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=damaged_frames())
    def prop(case: tuple[int, int, bytes, str]) -> None:
        api_key, version, frame, _what = case
        with contextlib.suppress(FrameError):
            decode_request(frame, api_key, version)

    prop()
    print("damaged ok")


def run_random_counts(max_examples: int) -> None:
    """Raw bodies made of random varints/int32s (big counts at every position) after a valid
    header, for every advertised API version."""

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(api=st.sampled_from(SUPPORTED), parts=st.lists(st.one_of(
        st.integers(0, 2**35 - 1).map(encode_uvarint),
        st.integers(-(2**31), 2**31 - 1).map(lambda v: struct.pack(">i", v)),
        st.binary(max_size=6)), max_size=12))
    def prop(api: tuple[int, int], parts: list[bytes]) -> None:
        key, version = api
        cls = request_class(key, version)
        prefix = _header(key, version) + (b"\x00" if cls.__header_schema__.__flexible__ else b"")
        with contextlib.suppress(FrameError):
            decode_request(prefix + b"".join(parts), key, version)

    prop()
    print("random counts ok")


def test_out_of_range_lengths_refused_in_child() -> None:
    out = _run_isolated("""
        from tests.test_wire_bounds import run_out_of_range
        run_out_of_range(600)
    """)
    for role in ("array", "string", "tags"):
        assert role in out


def test_damaged_frames_never_abort_in_child() -> None:
    assert "damaged ok" in _run_isolated("""
        from tests.test_wire_bounds import run_damaged
        run_damaged(600)
    """)


def test_random_counts_never_abort_in_child() -> None:
    assert "random counts ok" in _run_isolated("""
        from tests.test_wire_bounds import run_random_counts
        run_random_counts(800)
    """)


# --------------------------------------------------------------------------------------------
# single rules (pure-Python check only: safe in-process)


def test_null_in_non_nullable_array_is_refused() -> None:
    # ListOffsets v1: replica_id, topics = null (Kafka: "non-nullable field topics was
    # serialized as null", the connection is closed)
    with pytest.raises(FrameError, match=r"ListOffsetsRequest\.topics: null"):
        _checks(_header(2, 1) + struct.pack(">ii", -1, -1), 2, 1)
    # Metadata v0 has no null topics (v1+ does)
    with pytest.raises(FrameError, match="null"):
        _checks(_header(3, 0) + struct.pack(">i", -1), 3, 0)
    # OffsetFetch v1: topics not nullable; v2: null means every committed offset
    with pytest.raises(FrameError, match="null"):
        _checks(_header(9, 1) + b"\x00\x01g" + struct.pack(">i", -1), 9, 1)


def test_null_where_nullable_is_decoded_as_none() -> None:
    frame = _header(9, 2) + b"\x00\x01g" + struct.pack(">i", -1)
    assert decode_request(frame, 9, 2).body.topics is None
    metadata = _header(3, 4) + struct.pack(">i", -1) + b"\x01"
    assert decode_request(metadata, 3, 4).body.topics is None


def test_null_inside_an_element_is_refused() -> None:
    # OffsetFetch v2, topics = [ {name "t", partition_indexes = null} ]
    frame = _header(9, 2) + b"\x00\x01g" + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(
        ">i", -1)
    with pytest.raises(FrameError, match="partition_indexes: null"):
        _checks(frame, 9, 2)


@pytest.mark.parametrize("length", [-2, -32768])
def test_negative_string_length_is_refused(length: int) -> None:
    frame = _header(9, 1) + struct.pack(">h", length)
    with pytest.raises(FrameError, match="negative length"):
        _checks(frame, 9, 1)


def test_string_longer_than_the_frame_is_refused() -> None:
    frame = _header(9, 1) + struct.pack(">h", 100) + b"short"
    with pytest.raises(FrameError, match="ends inside"):
        _checks(frame, 9, 1)


def test_header_client_id_is_checked() -> None:
    frame = struct.pack(">hhih", 3, 1, 7, 3000) + b"abc"
    with pytest.raises(FrameError, match=r"RequestHeader\.client_id: the frame ends inside"):
        _checks(frame, 3, 1)


def test_varint_of_six_bytes_is_refused() -> None:
    frame = _header(3, 12) + b"\x00" + b"\xff\xff\xff\xff\xff\x01"
    with pytest.raises(FrameError, match="varint longer than 5 bytes"):
        _checks(frame, 3, 12)


def test_tagged_field_section_is_bounded() -> None:
    # Metadata v12 header v2: empty tags; body: no topics (null), flags, then a section that
    # declares a million tagged fields in a 20-byte frame
    frame = _header(3, 12) + b"\x00" + b"\x00\x01\x00" + encode_uvarint(1_000_000)
    with pytest.raises(FrameError, match="tagged fields cannot fit"):
        _checks(frame, 3, 12)
    oversized = _header(3, 12) + b"\x00" + b"\x00\x01\x00" + b"\x01\x05\x7f" + b"ab"
    with pytest.raises(FrameError, match="tagged field 5 of 127 bytes"):
        _checks(oversized, 3, 12)


def test_known_tagged_field_must_fit_its_declared_size() -> None:
    fetch = encode_frame(1, 12, {"replica_id": -1, "max_wait": 100, "min_bytes": 1,
                                 "max_bytes": 1000, "session_epoch": -1, "topics": [],
                                 "cluster_id": "abc"})
    assert _checks(fetch, 1, 12) is False
    assert decode_request(fetch, 1, 12).body.cluster_id == "abc"
    # the tag (0) says 4 bytes; its compact string inside claims 100
    position = fetch.rindex(b"\x00\x04\x04abc")
    bad = fetch[:position] + b"\x00\x04" + encode_uvarint(101) + b"abc" + fetch[position + 6:]
    with pytest.raises(FrameError, match="cluster_id"):
        _checks(bad, 1, 12)


def test_unknown_tagged_fields_are_reported_and_skipped() -> None:
    frame = _header(3, 12) + b"\x01\x05\x02ab" + b"\x00\x01\x00" + b"\x01\x09\x01z"
    assert _checks(frame, 3, 12) is True
    decoded = decode_request(frame, 3, 12)
    assert decoded.body.topics is None and decoded.correlation_id == 7


def test_bytes_after_the_body_are_ignored() -> None:
    frame = encode_frame(3, 12, {"topics": None, "allow_auto_topic_creation": False}) + b"\0" * 3
    assert decode_request(frame, 3, 12).body.topics is None


def test_element_budget_is_per_request() -> None:
    def delete_topics(count: int) -> bytes:  # DeleteTopics v1: topic_names, timeout
        return (_header(20, 1) + struct.pack(">i", count) + b"\x00\x01a" * count
                + struct.pack(">i", 1000))

    assert _checks(delete_topics(MAX_REQUEST_ELEMENTS), 20, 1) is False
    with pytest.raises(FrameError, match="more than 262144 array elements"):
        _checks(delete_topics(MAX_REQUEST_ELEMENTS + 1), 20, 1)


def test_array_of_fixed_elements_needs_all_their_bytes() -> None:
    # OffsetFetch v1: one topic with 3 partition indexes but only 2 present
    frame = (_header(9, 1) + b"\x00\x01g" + struct.pack(">i", 1) + b"\x00\x01t"
             + struct.pack(">iii", 3, 0, 1))
    with pytest.raises(FrameError):
        _checks(frame, 9, 1)
    assert _checks(frame + struct.pack(">i", 2), 9, 1) is False


def test_count_just_above_the_bytes_left_is_refused() -> None:
    # Produce v9 (flexible): topic_data declares 4 topics, 9 bytes remain (3 minimum each)
    head = _header(0, 9) + b"\x00" + b"\x00" + struct.pack(">hi", 1, 1000)
    with pytest.raises(FrameError, match="array of 4 elements"):
        _checks(head + encode_uvarint(5) + b"\x00" * 9, 0, 9)


# --------------------------------------------------------------------------------------------
# the request memory budget (pure logic; the live broker is in tests/test_wire_fuzz.py)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _pool(capacity: int | None) -> tuple[RequestMemory, _Clock, list[str]]:
    clock = _Clock()
    return RequestMemory(capacity, clock=clock), clock, []


def test_memory_within_capacity_evicts_nothing() -> None:
    async def scenario() -> None:
        pool, _clock, closed = _pool(100)
        a = pool.register(lambda: closed.append("a"))
        b = pool.register(lambda: closed.append("b"))
        await pool.reserve(a, 60)
        await pool.reserve(b, 40)
        assert (pool.used, closed) == (100, [])
        pool.release(a)
        assert pool.used == 40

    asyncio.run(scenario())


def test_memory_full_closes_the_stalest_partial_frame() -> None:
    async def scenario() -> None:
        pool, clock, closed = _pool(100)
        old = pool.register(lambda: closed.append("old"))
        fresh = pool.register(lambda: closed.append("fresh"))
        await pool.reserve(old, 50)
        clock.now = 5.0
        await pool.reserve(fresh, 40)
        clock.now = 6.0
        newcomer = pool.register(lambda: closed.append("newcomer"))
        await pool.reserve(newcomer, 30)  # needs 20 more: the frame idle since t=0 goes
        assert closed == ["old"] and old.evicted and old.held == 0
        assert pool.used == 70 and pool.evictions == 1
        with pytest.raises(RequestMemoryExhausted):
            await pool.reserve(old, 1)
        pool.unregister(old)
        assert pool.used == 70

    asyncio.run(scenario())


def test_memory_waits_for_frames_being_handled_instead_of_closing_them() -> None:
    async def scenario() -> None:
        pool, _clock, closed = _pool(100)
        handling = pool.register(lambda: closed.append("handling"))
        await pool.reserve(handling, 90)
        pool.frame_complete(handling)
        waiter = pool.register(lambda: closed.append("waiter"))
        task = asyncio.create_task(pool.reserve(waiter, 20))
        await asyncio.sleep(0.01)
        assert not task.done() and closed == []
        pool.release(handling)
        await asyncio.wait_for(task, 1)
        assert pool.used == 20 and closed == []

    asyncio.run(scenario())


def test_memory_evicted_while_waiting_raises() -> None:
    async def scenario() -> None:
        pool, clock, closed = _pool(100)
        handling = pool.register(lambda: closed.append("handling"))
        await pool.reserve(handling, 60)
        pool.frame_complete(handling)
        stalled = pool.register(lambda: closed.append("stalled"))
        await pool.reserve(stalled, 30)
        task = asyncio.create_task(pool.reserve(stalled, 30))  # waits: nothing to evict
        await asyncio.sleep(0.01)
        clock.now = 10.0
        other = pool.register(lambda: closed.append("other"))
        await pool.reserve(other, 30)  # evicts the stalled one, which is waiting
        with pytest.raises(RequestMemoryExhausted):
            await asyncio.wait_for(task, 1)
        assert closed == ["stalled"] and pool.used == 90

    asyncio.run(scenario())


def test_memory_unbounded_like_kafkas_minus_one() -> None:
    async def scenario() -> None:
        pool, _clock, closed = _pool(None)
        holder = pool.register(lambda: closed.append("x"))
        await pool.reserve(holder, 10**12)
        assert closed == [] and pool.used == 10**12

    asyncio.run(scenario())


def test_queued_max_request_bytes_settings_are_validated() -> None:
    base = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"}
    config = BrokerConfig.from_properties(base)
    assert config.queued_max_request_bytes == 2 * config.socket_request_max_bytes
    assert config.queued_max_request_bytes_per_connection == 1 << 20
    assert BrokerConfig.from_properties({**base, "queued.max.request.bytes": "-1"})
    with pytest.raises(InvalidConfigError, match=r"at least socket\.request\.max\.bytes"):
        BrokerConfig.from_properties({**base, "queued.max.request.bytes": "1000"})
    with pytest.raises(InvalidConfigError, match="must be positive"):
        BrokerConfig.from_properties({**base, "queued.max.request.bytes.per.connection": "0"})
