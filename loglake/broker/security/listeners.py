"""The broker's listeners: where it listens, with which security protocol, and what it publishes.

From Kafka's settings (config.py declares and cross-checks them):

* ``listeners=NAME://host:port,...``: one asyncio server per listener (broker/server.py);
* ``listener.security.protocol.map=NAME:PROTOCOL,...``: PLAINTEXT, SSL, SASL_PLAINTEXT or
  SASL_SSL per listener name (by default each of those names maps to itself);
* ``advertised.listeners``: the addresses registered in ``/brokers/ids/<id>`` (Kafka's JSON
  ``endpoints`` + ``listener_security_protocol_map``) and answered to clients: a client
  connected on listener L is told every broker's L endpoint (Metadata, FindCoordinator,
  DescribeCluster), and brokers without L are left out, as Kafka does;
* ``inter.broker.listener.name``: the listener brokers use to reach each other.

:class:`ListenerSpec` is one listener ready to serve (TLS context built); :func:`listener_specs`
reads the TLS files, so call it at start-up, not per connection. :func:`tls_principal` maps a
TLS peer's certificate to a principal with ``ssl.principal.mapping.rules``. Everything here is
immutable once built; safe to share between connections.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cryptography import x509

from loglake.broker.security import tls
from loglake.broker.security.principal import ANONYMOUS, KafkaPrincipal
from loglake.broker.security.principal_mapping import PrincipalMapper
from loglake.broker.security.session import uses_tls
from loglake.catalog.zookeeper import BrokerEndpoint
from loglake.config import BrokerConfig


@dataclass(frozen=True)
class ListenerSpec:
    """One listener to serve."""

    name: str
    host: str
    port: int
    security_protocol: str
    ssl_context: ssl.SSLContext | None
    principal_mapper: PrincipalMapper

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port} ({self.security_protocol})"


def listener_specs(config: BrokerConfig) -> list[ListenerSpec]:
    """Every listener of ``config`` with its TLS context (raises InvalidConfigError for a TLS
    listener whose keystore or truststore cannot be used)."""
    specs = []
    for address in config.effective_listeners:
        protocol = config.security_protocol(address.name)
        scoped = config.for_listener(address.name)
        context = tls.server_context(config, address.name) if uses_tls(protocol) else None
        specs.append(ListenerSpec(address.name, address.host, address.port, protocol, context,
                                  PrincipalMapper.parse(scoped.ssl_principal_mapping_rules)))
    return specs


def advertised_endpoints(config: BrokerConfig,
                         bound_ports: dict[str, int] | None = None) -> tuple[BrokerEndpoint, ...]:
    """What this broker registers: each listener's advertised address and protocol. A listener
    configured with port 0 advertises the port it was bound to, when ``bound_ports`` knows it."""
    bound = bound_ports or {}
    return tuple(
        BrokerEndpoint(address.name, address.host,
                       bound.get(address.name, address.port) if address.port == 0
                       else address.port,
                       config.security_protocol(address.name))
        for address in config.effective_advertised_listeners)


def tls_principal(ssl_object: ssl.SSLObject | None, mapper: PrincipalMapper) -> KafkaPrincipal:
    """The principal of a TLS connection: ``User:<mapped subject>`` for a client certificate
    (already verified by the handshake), ANONYMOUS without one. Raises NoMatchingRuleError when
    no mapping rule applies (the connection must then be closed)."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return ANONYMOUS
    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return KafkaPrincipal.user(mapper.name(subject))
