"""Watching announcements of changes to tiered topics' tables.

Clean-up jobs (compaction, retention, optimize, vacuum) and DeleteRecords replace and remove
files of a topic's Delta table; after each such commit they announce it in ZooKeeper
(``/loglake/table_changes/<topic>``, catalog/zookeeper.py). The broker watches that znode for
every tiered topic it hosts a replica of or has read, and on each announcement drops what it
cached of the table (tier_state.py) and checks the topic's local segments (local_retention.py).

Rules: a topic is watched once (its :class:`~loglake.broker.tier_state.TopicTier` holds the
watch's token; forgetting the topic ends the watch); :meth:`TableChangeWatcher.watch` is called
before anything of the table is cached, so a fresh replica watches before any read; setting a
watch counts as an announcement (the catalog calls back at once), so one made before is not
lost; a watch that fails to register is forgotten and set again on the tierer's next turn,
and meanwhile caches live at most READER_REFRESH_S.

Thread-safety: :meth:`TableChangeWatcher.watch` runs on the event loop and registers the watch
off it (it talks to ZooKeeper); the watch's callback comes on a kazoo thread and hops onto the
loop (``run_soon``) before touching any state.
"""

from __future__ import annotations

from collections.abc import Callable

from loglake.broker.failure_log import FailureLog
from loglake.broker.tier_state import READER_REFRESH_S, BackgroundTasks, TierState, TierZooKeeper


class TableChangeWatcher:
    """Table-change watches of the topics the tier code uses (see the module)."""

    def __init__(self, state: TierState, *, zookeeper: TierZooKeeper,
                 on_change: Callable[[str], None], failures: FailureLog,
                 tasks: BackgroundTasks) -> None:
        self._state = state
        self._zookeeper = zookeeper
        self._on_change = on_change  # called on the event loop with the topic's name
        self._failures = failures
        self._tasks = tasks

    def watch(self, topic: str) -> None:
        """Start watching ``topic``'s table changes unless already watched."""
        tier = self._state.topic(topic)
        if tier.watch_token is not None:
            return
        token = tier.watch_token = object()

        def alive() -> bool:  # (read on kazoo's thread)
            current = self._state.topics.get(topic)
            return current is not None and current.watch_token is token

        def changed() -> None:
            self._zookeeper.run_soon(lambda: self._on_change(topic))

        def register() -> None:
            self._zookeeper.catalog.watch_table_changes(topic, changed, alive=alive)

        async def registered() -> None:
            what = f"watching table changes of {topic} (meanwhile: reloads every " \
                   f"{READER_REFRESH_S:g} s)"
            try:
                await self._zookeeper.call(register)
            except Exception as exc:
                if alive():
                    self._state.topic(topic).watch_token = None  # the next turn tries again
                self._failures.failed(("watch", topic), what, exc)
            else:
                self._failures.succeeded(("watch", topic), what)

        self._tasks.spawn(registered())
