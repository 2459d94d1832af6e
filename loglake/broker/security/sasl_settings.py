"""The SASL settings of one listener: mechanisms, PLAIN users, limits.

Every value may be set per listener (``listener.name.<listener>.<key>``, applied by
``BrokerConfig.for_listener``) over the broker-wide one. PLAIN users come from Kafka's JAAS
form, options ``user_<name>="<password>"`` of a ``PlainLoginModule`` entry, found as Kafka
finds the server's JAAS entry (first present wins):

1. ``listener.name.<listener>.plain.sasl.jaas.config``;
2. ``listener.name.<listener>.sasl.jaas.config``, then the broker-wide ``sasl.jaas.config``;
3. the file named by ``sasl.jaas.file`` (alias ``java.security.auth.login.config``): its
   section ``<listener, lower case>.KafkaServer``, else ``KafkaServer``::

       KafkaServer {
           org.apache.kafka.common.security.plain.PlainLoginModule required
           username="admin" password="admin-secret"
           user_admin="admin-secret"
           user_alice="alice-secret";
       };

The file is read when the settings are built (once per listener, at the listener's first SASL
connection); a changed file takes effect at the broker's next start. SCRAM users are not here:
their credentials live in ZooKeeper (scram_credentials.py). Immutable once built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from loglake.broker.security.client_security import jaas_options
from loglake.config import BrokerConfig
from loglake.errors import InvalidConfigError

PLAIN = "PLAIN"
USER_OPTION_PREFIX = "user_"
_SECTION = re.compile(r"([A-Za-z0-9_.\-]+)\s*\{(.*?)\}\s*;", re.DOTALL)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


@dataclass(frozen=True)
class SaslListenerSettings:
    """What the SASL handlers and the pre-authentication gate need for one listener."""

    listener: str
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str] = field(repr=False, compare=False)
    max_receive_size: int
    authentication_timeout_s: float
    failed_authentication_delay_s: float
    max_reauth_ms: int


def parse_jaas_sections(text: str) -> dict[str, str]:
    """A JAAS file's sections: name -> the entries' text (comments removed)."""
    return {match.group(1): match.group(2)
            for match in _SECTION.finditer(_COMMENT.sub("", text))}


def plain_users(jaas_entry: str | None) -> dict[str, str]:
    """``user_<name>="<password>"`` options of a JAAS entry -> {name: password}."""
    if not jaas_entry:
        return {}
    return {key[len(USER_OPTION_PREFIX):]: value
            for key, value in jaas_options(jaas_entry).items()
            if key.startswith(USER_OPTION_PREFIX) and len(key) > len(USER_OPTION_PREFIX)}


def _plain_jaas(config: BrokerConfig, scoped: BrokerConfig, listener: str) -> str | None:
    entry = config.listener_setting(listener, "plain.sasl.jaas.config") or scoped.sasl_jaas_config
    if entry:
        return entry
    if not scoped.sasl_jaas_file:
        return None
    path = Path(scoped.sasl_jaas_file)
    try:
        sections = parse_jaas_sections(path.read_text())
    except OSError as exc:
        raise InvalidConfigError(f"sasl.jaas.file {path} cannot be read: {exc}") from None
    return sections.get(f"{listener.lower()}.KafkaServer") or sections.get("KafkaServer")


def listener_settings(config: BrokerConfig, listener: str) -> SaslListenerSettings:
    """The SASL settings of ``listener`` (InvalidConfigError if its JAAS file is unreadable)."""
    scoped = config.for_listener(listener)
    mechanisms = scoped.sasl_enabled_mechanisms
    users = plain_users(_plain_jaas(config, scoped, listener)) if PLAIN in mechanisms else {}
    return SaslListenerSettings(
        listener=listener,
        mechanisms=mechanisms,
        plain_users=users,
        max_receive_size=scoped.sasl_server_max_receive_size,
        authentication_timeout_s=scoped.sasl_server_authentication_timeout_ms / 1000,
        failed_authentication_delay_s=scoped.connection_failed_authentication_delay_ms / 1000,
        max_reauth_ms=scoped.connections_max_reauth_ms,
    )
