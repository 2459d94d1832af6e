"""Property tests of the request decoder: arbitrary bytes never raise anything but FrameError,
and real requests round-trip through encode -> decode."""

from __future__ import annotations

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from loglake.broker.apis import API_TABLE
from loglake.broker.codec import FrameError, decode_header, decode_request
from tests.wire import WireClient

SUPPORTED = [(api.key, v) for api in API_TABLE.values()
             for v in range(api.min_version, api.max_version + 1)]


@settings(max_examples=600, deadline=None)
@given(api=st.sampled_from(SUPPORTED), body=st.binary(max_size=300))
def test_random_bodies_raise_only_frame_error(api, body):
    key, version = api
    header = key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x01"
    with contextlib.suppress(FrameError):
        decode_request(header + body, key, version)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=64))
def test_header_decoder_total(data):
    try:
        decode_header(data)
    except FrameError:
        assert len(data) < 8


@settings(max_examples=200, deadline=None)
@given(
    topics=st.lists(st.text(alphabet="abcxyz-._", min_size=1, max_size=20), max_size=4),
    version=st.integers(min_value=1, max_value=12),
    mutate=st.integers(min_value=0, max_value=400),
)
def test_metadata_round_trip_and_mutation(topics, version, mutate):
    client = WireClient.__new__(WireClient)
    client.correlation_id = 0
    frame = client.encode(3, version, {"topics": [{"name": t} for t in topics]})[4:]
    decoded = decode_request(frame, 3, version)
    assert [t.name for t in decoded.body.topics] == topics
    if mutate < len(frame):
        corrupted = bytearray(frame)
        corrupted[mutate] ^= 0x5A
        with contextlib.suppress(FrameError):
            decode_request(bytes(corrupted), 3, version)
