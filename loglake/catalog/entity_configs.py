"""Client entity configs in Kafka's ZooKeeper layout: users and client ids, where SCRAM
credentials and client quotas live.

Layout under the cluster chroot (Kafka's ``ConfigEntityZNode`` and change notifications)::

    /config/users/<user>                       {"version": 1, "config": {...}}
    /config/clients/<client id>                {"version": 1, "config": {...}}
    /config/users/<user>/clients/<client id>   {"version": 1, "config": {...}}
    /config/ips/<ip>                           {"version": 1, "config": {...}}
    /config/changes/config_change_<seq>        {"version": 2, "entity_path": "users/alice"}

``<user>`` and ``<client id>`` are sanitized as Kafka's ``Sanitizer`` does (URL-encoded UTF-8,
``*`` as ``%2A``, space as ``%20``); ``<default>`` is the default entity, written as is. The
``config`` map of a user holds its SCRAM credentials (``SCRAM-SHA-256``: ``salt=..,
stored_key=..,server_key=..,iterations=..``, never the password) next to its quotas
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``); each writer changes
only its own keys (:meth:`EntityConfigStore.alter`, version-conditioned, retried on a lost
race), so credentials and quotas never overwrite each other. Every change appends a change
notification, which brokers watch.

Errors: kazoo's connection errors become ZooKeeperUnavailableError. Thread-safety: stateless
beyond kazoo (thread-safe); blocking, so brokers call it on the ZooKeeper executor
(``ZkSession.call``), never on the event loop.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from loglake.catalog.zookeeper import _typed_errors

CONFIG_ROOT = "/config"
CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
USERS = "users"
CLIENTS = "clients"
IPS = "ips"
"""IP entities (``/config/ips/<ip>``: KIP-612 connection-rate quotas); names sanitized too."""
DEFAULT_ENTITY = "<default>"
ALTER_ATTEMPTS = 20


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: the znode name of a user or client id."""
    if name == DEFAULT_ENTITY:
        return name
    return urllib.parse.quote(name, safe="-_.~").replace("~", "%7E")


def desanitize(node: str) -> str:
    if node == DEFAULT_ENTITY:
        return node
    return urllib.parse.unquote(node)


def entity_path(user: str | None = None, client_id: str | None = None) -> str:
    """The entity path below ``/config`` (``users/alice``, ``clients/app``,
    ``users/alice/clients/app``, ``users/<default>``); names are sanitized here."""
    if user is not None and client_id is not None:
        return f"{USERS}/{sanitize(user)}/{CLIENTS}/{sanitize(client_id)}"
    if user is not None:
        return f"{USERS}/{sanitize(user)}"
    if client_id is not None:
        return f"{CLIENTS}/{sanitize(client_id)}"
    raise ValueError("an entity names a user, a client id or both")


class EntityConfigStore:
    """Read and change entity configs (see the module docstring). Blocking."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    def get(self, path: str) -> dict[str, str]:
        """The config map of entity ``path`` (``users/alice``); {} when it has none."""
        with _typed_errors(f"reading /config/{path}"):
            try:
                raw, _ = self.zk.get(f"{CONFIG_ROOT}/{path}")
            except NoNodeError:
                return {}
        return _config_of(raw)

    def alter(self, path: str, updates: Mapping[str, str | None]) -> dict[str, str]:
        """Set (value) or remove (None) keys of entity ``path``'s config, leaving the other
        keys as they are; version-conditioned, retried when another writer got in between.
        Appends a change notification. Returns the new config map."""
        znode = f"{CONFIG_ROOT}/{path}"
        with _typed_errors(f"changing /config/{path}"):
            for _ in range(ALTER_ATTEMPTS):
                try:
                    raw, stat = self.zk.get(znode)
                    current, version = _config_of(raw), stat.version
                except NoNodeError:
                    current, version = {}, -1
                merged = dict(current)
                for key, value in updates.items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = value
                data = json.dumps({"version": 1, "config": merged}).encode()
                try:
                    if version < 0:
                        self.zk.create(znode, data, makepath=True)
                    else:
                        self.zk.set(znode, data, version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    continue
                self._notify(path)
                return merged
        raise RuntimeError(f"/config/{path} kept changing under {ALTER_ATTEMPTS} attempts")

    def entities(self, entity_type: str) -> list[str]:
        """Entity paths of a type: ``users`` -> [``users/alice``, ...]; ``users/clients`` ->
        every ``users/<u>/clients/<c>``; ``clients`` -> [``clients/app``, ...]."""
        with _typed_errors(f"listing /config/{entity_type}"):
            if entity_type == f"{USERS}/{CLIENTS}":
                out: list[str] = []
                for user in self._children(f"{CONFIG_ROOT}/{USERS}"):
                    for client in self._children(f"{CONFIG_ROOT}/{USERS}/{user}/{CLIENTS}"):
                        out.append(f"{USERS}/{user}/{CLIENTS}/{client}")
                return out
            return [f"{entity_type}/{child}"
                    for child in self._children(f"{CONFIG_ROOT}/{entity_type}")]

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self.zk.get_children(path))
        except NoNodeError:
            return []

    def _notify(self, path: str) -> None:
        data = json.dumps({"version": 2, "entity_path": path}).encode()
        self.zk.create(f"{CHANGES}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)


def _config_of(raw: bytes) -> dict[str, str]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    config = value.get("config", {}) if isinstance(value, dict) else {}
    return {str(k): str(v) for k, v in config.items()} if isinstance(config, dict) else {}
