"""What client quotas cost per request, in process (no sockets, no broker process).

Run from the repository root with the project's virtualenv::

    python bench/quota_overhead.py [--requests 20000] [--rounds 5]

Each round times ``KafkaServer._handle`` (header decode, request decode, handler, response
encode: everything the network layer does per request but the socket) for an ApiVersions v3
request, the cheapest request there is, so the quota path's share is as large as it can be,
in four set-ups:

1. ``none``: no quota ever configured (the default: ``ClientQuotas.enabled`` is False, the
   handler is called directly);
2. ``other-client``: a ``producer_byte_rate`` quota exists for another client id, so every
   request goes through ``handle_with_quotas`` but this client has no quota;
3. ``request-quota``: a ``request_percentage`` quota (high enough never to throttle) applies to
   this client, so each request's handler time is measured and recorded;
4. ``hook-only``: the two checks the server makes on the no-quota path
   (``services.quotas.enabled`` before the handler, ``session.muted_until`` after the
   response), timed alone with ``timeit``.

Reports the median per-request time of each set-up over the rounds (progress on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import tempfile
import time
import timeit
from types import SimpleNamespace
from typing import Any

from kio.serial import entity_writer

from loglake.broker.codec import build, request_class
from loglake.broker.quotas.entities import QuotaEntity
from loglake.broker.quotas.manager import ClientQuotas
from loglake.broker.security.authorizer import AllowAllAuthorizer
from loglake.broker.security.session import Session
from loglake.broker.server import KafkaServer
from loglake.config import BrokerConfig


def _api_versions_frame() -> bytes:
    cls = request_class(18, 3)
    header_cls = cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(buffer, build(header_cls, {
        "request_api_key": 18, "request_api_version": 3, "correlation_id": 1,
        "client_id": "bench-client"}))
    entity_writer(cls)(buffer, build(cls, {"client_software_name": "bench",
                                           "client_software_version": "1"}))
    return buffer.getvalue()


def _server(quotas: ClientQuotas, log_dir: str) -> KafkaServer:
    config = BrokerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "127.0.0.1:1",
                                           "log.dir": log_dir})
    services: Any = SimpleNamespace(config=config, quotas=quotas,
                                    authorizer=AllowAllAuthorizer())
    return KafkaServer(services)


def _time_handle(server: KafkaServer, data: bytes, requests: int) -> float:
    session = Session(client_host="127.0.0.1")

    async def loop() -> float:
        started = time.perf_counter()
        for _ in range(requests):
            response = await server._handle(data, ("127.0.0.1", 1), session)
            assert response is not None
        return (time.perf_counter() - started) / requests

    return asyncio.run(loop())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    data = _api_versions_frame()
    with tempfile.TemporaryDirectory() as log_dir:
        none = ClientQuotas()
        other = ClientQuotas()
        other.apply(QuotaEntity(client_id="someone-else"), {"producer_byte_rate": "1000"})
        request = ClientQuotas()
        request.apply(QuotaEntity(client_id="bench-client"), {"request_percentage": "10000"})
        setups = {"none": _server(none, log_dir), "other-client": _server(other, log_dir),
                  "request-quota": _server(request, log_dir)}
        results: dict[str, list[float]] = {name: [] for name in [*setups, "hook-only"]}
        services = SimpleNamespace(quotas=none)
        session = Session()
        for round_index in range(args.rounds):
            for name, server in setups.items():
                results[name].append(_time_handle(server, data, args.requests))
            results["hook-only"].append(min(timeit.repeat(
                "services.quotas.enabled; session.muted_until", number=args.requests * 10,
                repeat=3, globals={"services": services, "session": session}))
                / (args.requests * 10))
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr)
    base = statistics.median(results["none"])
    print(f"{'set-up':<15} {'us/request':>11} {'vs none':>8}")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"{name:<15} {median * 1e6:>11.3f} {median / base:>8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
