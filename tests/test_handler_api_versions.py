"""In-process unit test of a request handler: ApiVersions called directly with a decoded request
frame (no socket, no broker process), its encoded response checked byte by byte (v0) and decoded
as a client would (every version).

ApiVersions uses nothing of the broker's services, so the handler gets ``None`` for them; the
request goes the way the server sends it: frame bytes -> ``codec.decode_header`` ->
``codec.decode_request`` -> the handler of the API table's row -> ``codec.encode_response``.
"""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from loglake.broker.apis import API_TABLE
from loglake.broker.codec import (
    build,
    decode_header,
    decode_request,
    encode_response,
    request_class,
    response_class,
)

API_VERSIONS = 18
CORRELATION_ID = 4242


def request_frame(version: int, body: dict[str, Any]) -> bytes:
    """A request as a client puts it on the wire, without the int32 size prefix."""
    cls = request_class(API_VERSIONS, version)
    header_cls = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, build(header_cls, {
        "request_api_key": API_VERSIONS, "request_api_version": version,
        "correlation_id": CORRELATION_ID, "client_id": "unit-test"}))
    entity_writer(cls)(buffer, build(cls, body))
    return buffer.getvalue()


def handle(frame_bytes: bytes) -> bytes:
    """Decode, dispatch through the API table, encode: the server's path for one request."""
    api_key, version, correlation_id = decode_header(frame_bytes)
    frame = decode_request(frame_bytes, api_key, version)
    assert (frame.api_key, frame.api_version, frame.correlation_id, frame.client_id) == (
        API_VERSIONS, version, CORRELATION_ID, "unit-test")
    api = API_TABLE[api_key]
    assert api.supports(version)
    response = asyncio.run(api.handler(None, frame))  # type: ignore[arg-type]
    return encode_response(api_key, version, correlation_id, response)


def expected_rows() -> list[tuple[int, int, int]]:
    return [(api.key, api.min_version, api.max_version)
            for api in sorted(API_TABLE.values(), key=lambda api: api.key)]


def test_v0_response_bytes() -> None:
    """v0: int32 size, int32 correlation id, int16 error, int32 count, (int16 key, int16 min,
    int16 max) per API, ascending by key; nothing else."""
    encoded = handle(request_frame(0, {}))
    rows = expected_rows()
    expected = struct.pack(">ihi", CORRELATION_ID, 0, len(rows))
    expected += b"".join(struct.pack(">hhh", *row) for row in rows)
    assert encoded == struct.pack(">i", len(expected)) + expected


@pytest.mark.parametrize("version", range(API_TABLE[API_VERSIONS].min_version,
                                          API_TABLE[API_VERSIONS].max_version + 1))
def test_every_version_lists_exactly_the_api_table(version: int) -> None:
    body = {"client_software_name": "unit-test", "client_software_version": "1.0"}
    encoded = handle(request_frame(version, body))
    (size,) = struct.unpack(">i", encoded[:4])
    assert size == len(encoded) - 4
    (correlation_id,) = struct.unpack(">i", encoded[4:8])
    assert correlation_id == CORRELATION_ID
    # ApiVersions answers with response header v0 at every version (no tagged fields), so
    # clients can read it before they know which versions the broker speaks
    response, consumed = entity_reader(response_class(API_VERSIONS, version))(encoded, 8)
    assert 8 + consumed == len(encoded)
    assert response.error_code == ErrorCode.none
    assert [(row.api_key, row.min_version, row.max_version)
            for row in response.api_keys] == expected_rows()
    if version >= 1:
        assert response.throttle_time.total_seconds() == 0


def test_table_advertises_apis_a_client_needs_first() -> None:
    keys = {api.key for api in API_TABLE.values()}
    assert {API_VERSIONS, 3, 0, 1} <= keys  # ApiVersions, Metadata, Produce, Fetch
