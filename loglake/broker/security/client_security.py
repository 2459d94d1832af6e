"""How this broker connects to other brokers: the security of ``inter.broker.listener.name``.

:class:`ClientSecurity` is what a :class:`~loglake.broker.connection.BrokerConnection` needs:
the listener's security protocol, a TLS client context for SSL / SASL_SSL, and for SASL_* the
mechanism (Kafka's ``sasl.mechanism.inter.broker.protocol``, default GSSAPI, which loglake does
not serve: set PLAIN or SCRAM-SHA-256/512) with the broker's own username and password.

Credentials, as Kafka reads them, first found wins:

1. ``listener.name.<listener>.<mechanism, lower case>.sasl.jaas.config``;
2. ``listener.name.<listener>.sasl.jaas.config``;
3. the broker-wide ``sasl.jaas.config`` when the SASL settings declare one;

each a JAAS entry such as ``org.apache.kafka.common.security.scram.ScramLoginModule required
username="broker" password="secret";`` whose ``username``/``password`` options are taken
(:func:`jaas_options`).

The TLS side is :func:`loglake.broker.security.tls.client_context` of that listener: its
truststore and keystore (PEM, PKCS12 or JKS files, or KIP-651 inline PEM; read through
:mod:`loglake.keystores`) as the listeners themselves use them, so a broker whose keystore is
a ``.jks`` file presents that certificate to the other brokers too.

Built once at broker start (TLS files are read then); the value is immutable and shared by
every inter-broker connection.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

from loglake.broker.security import tls
from loglake.broker.security.session import PLAINTEXT, uses_sasl, uses_tls
from loglake.config import BrokerConfig
from loglake.errors import InvalidConfigError

DEFAULT_INTER_BROKER_MECHANISM = "GSSAPI"
_JAAS_OPTION = re.compile(r'([A-Za-z0-9_.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


@dataclass(frozen=True)
class ClientSecurity:
    """The security of a connection to another broker (see the module docstring)."""

    security_protocol: str
    ssl_context: ssl.SSLContext | None
    sasl_mechanism: str | None
    sasl_username: str | None
    sasl_password: str | None


PLAINTEXT_CLIENT = ClientSecurity(PLAINTEXT, None, None, None, None)


def jaas_options(text: str) -> dict[str, str]:
    """The ``key=value`` / ``key="value"`` options of one JAAS login-module entry (the module
    class name and the control flag are skipped; ``\\"`` inside quotes is unescaped)."""
    options: dict[str, str] = {}
    for match in _JAAS_OPTION.finditer(text):
        quoted, bare = match.group(2), match.group(3)
        value = bare if quoted is None else re.sub(r"\\(.)", r"\1", quoted)
        options[match.group(1)] = value
    return options


def _jaas_config(config: BrokerConfig, listener: str, mechanism: str) -> str | None:
    return (config.listener_setting(listener, f"{mechanism.lower()}.sasl.jaas.config")
            or config.listener_setting(listener, "sasl.jaas.config")
            or getattr(config, "sasl_jaas_config", None))


def client_security_from_config(config: BrokerConfig) -> ClientSecurity:
    """The security of ``inter.broker.listener.name`` (raises InvalidConfigError when its TLS
    files cannot be read or its SASL credentials are missing)."""
    listener = config.inter_broker_listener
    protocol = config.security_protocol(listener)
    if protocol == PLAINTEXT:
        return PLAINTEXT_CLIENT
    context = tls.client_context(config, listener) if uses_tls(protocol) else None
    if not uses_sasl(protocol):
        return ClientSecurity(protocol, context, None, None, None)
    scoped = config.for_listener(listener)
    mechanism = (getattr(scoped, "sasl_mechanism_inter_broker_protocol", None)
                 or DEFAULT_INTER_BROKER_MECHANISM)
    jaas = _jaas_config(config, listener, mechanism)
    options = jaas_options(jaas) if jaas else {}
    username, password = options.get("username"), options.get("password")
    if username is None or password is None:
        raise InvalidConfigError(
            f"inter-broker listener {listener} uses {protocol} with {mechanism} but no "
            f"username/password for the broker: set listener.name.{listener.lower()}."
            f"{mechanism.lower()}.sasl.jaas.config to a JAAS entry with username=\"...\" "
            f"password=\"...\"")
    return ClientSecurity(protocol, context, mechanism, username, password)
