"""Kafka principals: ``<type>:<name>``, as in ACLs, ``super.users`` and audit logs.

Kafka's default principal builder gives ``User:ANONYMOUS`` to PLAINTEXT connections and to SSL
connections without a client certificate, ``User:<mapped subject>`` to SSL connections with one
(``ssl.principal.mapping.rules``) and ``User:<authenticated id>`` to SASL connections.
Immutable, so any thread may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); ValueError without a type."""
        principal_type, sep, name = text.strip().partition(":")
        if not sep or not principal_type or not name:
            raise ValueError(f"a principal looks like User:<name>, got {text!r}")
        return cls(principal_type, name)

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
"""The principal of an unauthenticated (PLAINTEXT, or SSL without client certificate)
connection, as in Kafka."""
