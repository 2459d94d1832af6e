"""KIP-951 leader hints for Produce v10+: a partition answered NOT_LEADER_OR_FOLLOWER names the
leader this broker knows (``current_leader``: id and epoch, -1/-1 when it knows none) and the
response lists those leaders' endpoints (``node_endpoints``: id, host, port, rack), so clients
move to the new leader without a Metadata round trip. Kafka 4.0 fills them exactly there
(``KafkaApis.handleProduceRequest``); other errors carry no hint.

The Produce handler (handlers/produce.py) answers every version; this wrapper adds the hints to
its v10+ response, from the broker's metadata cache (partition states and live brokers).
Produce v11 and v12 differ from v10 only for transactional producers (TRANSACTION_ABORTABLE,
KIP-890's implicit AddPartitionsToTxn), which this broker refuses whatever the version, so the
same handler serves them.

Runs on the event loop; reads the metadata cache only.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake.broker.codec import RequestFrame, build
from loglake.broker.handlers import produce as produce_handler

if TYPE_CHECKING:
    from loglake.broker.services import BrokerServices

FIRST_VERSION_WITH_HINTS = 10


async def produce(services: BrokerServices, frame: RequestFrame) -> Any:
    """Produce, with KIP-951 leader hints from v10 on."""
    response = await produce_handler.produce(services, frame)
    if response is None or frame.api_version < FIRST_VERSION_WITH_HINTS:
        return response
    return with_leader_hints(services, response, frame.session.listener)


def with_leader_hints(services: BrokerServices, response: Any,
                      listener: str = "PLAINTEXT") -> Any:
    """``response`` (a Produce v10+ response) with hints on NOT_LEADER_OR_FOLLOWER partitions;
    the same object when no partition has that error. Endpoints are those of ``listener``
    (the client's); a leader without that listener gets no endpoint."""
    if not any(p.error_code == ErrorCode.not_leader_or_follower
               for topic in response.responses for p in topic.partition_responses):
        return response
    data = dataclasses.asdict(response)
    leaders: set[int] = set()
    for topic in data["responses"]:
        for partition in topic["partition_responses"]:
            if partition["error_code"] != ErrorCode.not_leader_or_follower:
                continue
            leader, epoch = current_leader(services, topic["name"], partition["index"])
            partition["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
            if leader >= 0:
                leaders.add(leader)
    live = services.metadata.live_brokers
    data["node_endpoints"] = [
        {"node_id": node, "host": endpoint.host, "port": endpoint.port,
         "rack": live[node].rack} for node in sorted(leaders)
        if (endpoint := services.metadata.endpoint(node, listener)) is not None]
    return build(type(response), data)


def current_leader(services: BrokerServices, topic: str, index: int) -> tuple[int, int]:
    """(leader id, leader epoch) of a partition as this broker's metadata cache has it;
    (-1, -1) when there is no live leader (Kafka's ``getCurrentLeader``)."""
    state = services.metadata.partition_states.get((topic, index))
    if state is None or state.leader not in services.metadata.live_brokers:
        return -1, -1
    return state.leader, state.leader_epoch
