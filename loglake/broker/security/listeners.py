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
TLS peer's certificate to a principal with ``ssl.principal.mapping.rules``, applied to the
subject in Java's RFC 2253 form (:func:`java_rfc2253`), as Kafka does. Everything here is
immutable once built; safe to share between connections.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

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
    subject = java_rfc2253(x509.load_der_x509_certificate(der).subject)
    return KafkaPrincipal.user(mapper.name(subject))


_RFC2253_KEYWORDS = frozenset({
    NameOID.COMMON_NAME, NameOID.COUNTRY_NAME, NameOID.LOCALITY_NAME,
    NameOID.STATE_OR_PROVINCE_NAME, NameOID.ORGANIZATION_NAME,
    NameOID.ORGANIZATIONAL_UNIT_NAME, NameOID.STREET_ADDRESS, NameOID.DOMAIN_COMPONENT,
    NameOID.USER_ID})


def java_rfc2253(name: x509.Name) -> str:
    """A subject as Java's ``X500Principal.getName()`` (RFC 2253) prints it, which is what
    Kafka's principal mapping rules are written against: most specific RDN first, the
    keywords CN, C, L, ST, O, OU, STREET, DC, UID, and any other attribute (emailAddress,
    serialNumber, ...) as its dotted OID with ``#`` and the value's DER in lower-case hex
    (``1.2.840.113549.1.9.1=#1611...``; the DER is taken from the encoded name)."""
    raw = _raw_values(name.public_bytes())
    rdns = []
    for index, rdn in enumerate(name.rdns):
        parts = []
        for position, attribute in enumerate(rdn):
            if attribute.oid in _RFC2253_KEYWORDS:
                parts.append(attribute.rfc4514_string())
            else:
                parts.append(f"{attribute.oid.dotted_string}=#{raw[index][position].hex()}")
        rdns.append("+".join(parts))
    return ",".join(reversed(rdns))


def _tlv(data: bytes, offset: int) -> tuple[int, int]:
    """(content start, content end = element end) of the DER element at ``offset``."""
    length = data[offset + 1]
    start = offset + 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(data[start:start + count], "big")
        start += count
    return start, start + length


def _walk(data: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    """The elements inside ``data[start:end]``: (offset, content start, content end)."""
    elements = []
    while start < end:
        content, content_end = _tlv(data, start)
        elements.append((start, content, content_end))
        start = content_end
    return elements


def _raw_values(der: bytes) -> list[list[bytes]]:
    """Per RDN, per attribute: the DER of its value (Name = SEQUENCE OF SET OF SEQUENCE {OID,
    value}), in the order cryptography lists them."""
    content, end = _tlv(der, 0)
    result = []
    for _, set_start, set_end in _walk(der, content, end):
        values = []
        for _, pair_start, pair_end in _walk(der, set_start, set_end):
            _oid, (value_offset, _, value_end) = _walk(der, pair_start, pair_end)[:2]
            values.append(der[value_offset:value_end])
        result.append(values)
    return result
