"""Keeping the broker's client quotas (manager.ClientQuotas) equal to the user and client-id
entity configs in ZooKeeper (Kafka's ``ZkConfigManager`` + ``QuotaConfigHandler``), and the
IP entities' connection-rate quotas (``/config/ips/*``, ``ClientQuotas.ips``).

Start-up: start watching ``/config/changes``, note the newest notification, then load every
``/config/users/*``, ``/config/clients/*`` and ``/config/users/*/clients/*`` config. A watch
firing (kazoo's thread) only sets an event on the loop; :meth:`QuotaConfigSync.run` then reads
the notifications newer than the last processed one and re-reads each entity they name, on
the ZooKeeper executor, and applies it on the loop. The watch is set before the load, so no
change is missed (one made during the load is read again: applying is idempotent). A gap in
the sequence (notifications purged before we read them) or an unreadable one reloads
everything. Every ``PURGE_INTERVAL_S`` notifications older than 15 minutes are removed.

A broker's own AlterClientQuotas applies what it wrote at once (:meth:`apply_entity`), so the
next request on this broker already sees it; others follow their watch (milliseconds).

Notifications about other entities (brokers, topics) are skipped. Entity configs of users also
hold SCRAM credentials, which are not quota keys: they go to the ``credentials`` sink when one
is given (the SASL handler's cache of every user's credentials, for logins while ZooKeeper
cannot be read, as Kafka's credential cache is fed by the same config handler): every user's
config at each full load (:meth:`UserCredentialSink.load_all`), a user's config after each
change naming it (:meth:`UserCredentialSink.update`).

Event loop only, except the blocking catalog calls, which run on the ZooKeeper executor.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from loglake.broker.quotas.entities import DEFAULT_ENTITY, QuotaEntity, entity_of_path
from loglake.broker.quotas.ip_quotas import ip_of_path
from loglake.broker.quotas.manager import ClientQuotas

if TYPE_CHECKING:
    from loglake.broker.zk_session import ZkSession
    from loglake.catalog.config_changes import ConfigChanges

log = logging.getLogger(__name__)

PURGE_INTERVAL_S = 60.0
RETRY_DELAY_S = 0.5


class UserCredentialSink(Protocol):
    """Where users' entity configs go besides the quotas (event loop only)."""

    def load_all(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        """Every user's config (user name -> config map) as just loaded."""

    def update(self, user: str, config: Mapping[str, str]) -> None:
        """One user's config as just re-read (empty: removed)."""


class QuotaConfigSync:
    """Loads and follows the entity configs into a :class:`ClientQuotas` (see module)."""

    def __init__(self, zk: ZkSession, quotas: ClientQuotas, *,
                 stopping: Callable[[], bool],
                 credentials: UserCredentialSink | None = None) -> None:
        self.zk = zk
        self.quotas = quotas
        self.stopping = stopping
        self.credentials = credentials
        self._changed = asyncio.Event()
        self._sequence = -1

    @property
    def store(self) -> ConfigChanges:
        return self.zk.catalog.config_changes()

    async def start(self) -> None:
        """Watch, then load (each step waits out ZooKeeper outages)."""
        await self.zk.step("watching config changes", self.store.watch, self._on_watch,
                           lambda: not self.stopping())
        await self._reload_all()

    def _on_watch(self) -> None:
        """kazoo's thread: hop onto the loop."""
        self.zk.run_soon(self._changed.set)

    async def _reload_all(self) -> None:
        store = self.store
        sequence = await self.zk.step("reading config change notifications",
                                      store.last_sequence)
        configs = await self.zk.step("loading client quotas", store.load_all)
        self._sequence = sequence
        entities = {entity: config for path, config in configs.items()
                    if (entity := entity_of_path(path)) is not None}
        self.quotas.replace_all(entities)
        self.quotas.ips.replace_all({ip: config for path, config in configs.items()
                                     if (ip := ip_of_path(path)) is not None})
        if self.credentials is not None:
            self.credentials.load_all({user: config for entity, config in entities.items()
                                       if (user := _user_of(entity)) is not None})
        log.info("loaded client quotas of %d entities",
                 len(self.quotas.entity_quotas()))

    def apply_entity(self, entity: QuotaEntity, config: Mapping[str, str]) -> None:
        """``entity``'s whole config, just written or read."""
        self.quotas.apply(entity, config)

    async def run(self) -> None:
        """Process change notifications until cancelled; purge old ones now and then."""
        loop = asyncio.get_running_loop()
        next_purge = loop.time() + PURGE_INTERVAL_S
        while not self.stopping():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(),
                                       max(0.1, next_purge - loop.time()))
            try:
                if self._changed.is_set():
                    self._changed.clear()
                    await self.process_changes()
                if loop.time() >= next_purge:
                    next_purge = loop.time() + PURGE_INTERVAL_S
                    await self.zk.call(self.store.purge)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("processing config changes failed (%s); retrying", exc)
                self._changed.set()
                await asyncio.sleep(RETRY_DELAY_S)

    async def process_changes(self) -> int:
        """Re-read the entities named by notifications newer than the last processed one;
        returns how many notifications were processed."""
        store = self.store
        changes = await self.zk.call(store.changes_after, self._sequence)
        if not changes:
            return 0
        # sequence numbers follow the parent's child version, so purges skip numbers too:
        # a skip may be harmless, but reloading everything is always right
        gap = (self._sequence >= 0 and changes[0].sequence > self._sequence + 1) or any(
            change.entity_path is None for change in changes)
        if gap:
            await self._reload_all()
            return len(changes)
        for path in dict.fromkeys(change.entity_path for change in changes):
            entity = entity_of_path(path or "")
            ip = ip_of_path(path or "")
            if entity is None and ip is None:
                continue
            config = await self.zk.call(store.get, path)
            if entity is not None:
                self.apply_entity(entity, config)
                user = _user_of(entity)
                if user is not None and self.credentials is not None:
                    self.credentials.update(user, config)
            elif ip is not None:
                self.quotas.ips.apply(ip, config)
        self._sequence = changes[-1].sequence
        return len(changes)


def _user_of(entity: QuotaEntity) -> str | None:
    """The user of a ``/config/users/<user>`` entity (where SCRAM credentials live), else
    None (client ids, user + client id pairs, ``<default>``)."""
    if entity.user is None or entity.client_id is not None or entity.user == DEFAULT_ENTITY:
        return None
    return entity.user
