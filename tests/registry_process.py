"""A ``loglake registry`` process started by a test (:class:`RegistryProcess`), on a free
loopback port, against a cluster's ZooKeeper; killed (SIGKILL) or stopped (SIGTERM) by the
test, which signals only the process it started.

``with registry_process(tmp_path / "r.log", cluster.zookeeper_connect) as registry:`` yields
once ``GET /`` answers (any status: 401 counts with ``--basic-auth``); ``registry.url`` is the
base URL. :meth:`RegistryProcess.restart` starts it again on the same port (a killed one's port
may take a moment to be bindable: the start is retried, bounded).

For module-scoped fixtures (``yield from`` them): :func:`own_cluster`, a cluster of the module's
own (its own ZooKeeper chroot, so global config and mode changes touch no other module), and
:func:`module_registry`, one registry process for the module.
"""

from __future__ import annotations

import contextlib
import ssl
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from loglake.dev.harness import DevCluster
from loglake.dev.net import free_port_block
from tests.child_process import LoggedChild

START_TIMEOUT_S = 60.0


class RegistryProcess(LoggedChild):
    """``python -m loglake registry --zookeeper ... --port P [extra]``."""

    def __init__(self, log_path: Path, zookeeper: str, *, port: int | None = None,
                 extra: Sequence[str] = (), ca: str | None = None) -> None:
        super().__init__(log_path)
        self.zookeeper = zookeeper
        self.port = port or free_port_block(1)
        self.extra = list(extra)
        self.https = "--certfile" in self.extra
        self.ca = ca

    @property
    def url(self) -> str:
        return f"{'https' if self.https else 'http'}://127.0.0.1:{self.port}"

    def verify(self) -> ssl.SSLContext | bool:
        return ssl.create_default_context(cafile=self.ca) if self.ca else True

    def start(self) -> RegistryProcess:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            self._spawn([sys.executable, "-m", "loglake", "registry", "--zookeeper",
                         self.zookeeper, "--port", str(self.port), *self.extra])
            while time.monotonic() < deadline and self.alive():
                if self._answers():
                    return self
                time.sleep(0.1)
            if self.alive():
                self.kill()
                raise AssertionError(f"registry did not answer within {START_TIMEOUT_S}s:\n"
                                     f"{self.log_tail()}")
            if "Address already in use" not in self.log_tail(5) or \
                    time.monotonic() >= deadline:
                raise AssertionError(f"registry exited:\n{self.log_tail()}")
            time.sleep(0.5)  # a killed instance's port is not bindable yet

    def _answers(self) -> bool:
        try:
            httpx.get(self.url + "/", timeout=2.0, verify=self.verify())
        except httpx.HTTPError:
            return False
        return True

    def restart(self) -> RegistryProcess:
        self.stop(timeout=20)
        return self.start()


@contextlib.contextmanager
def registry_process(log_path: Path, zookeeper: str, *, extra: Sequence[str] = (),
                     ca: str | None = None) -> Iterator[RegistryProcess]:
    registry = RegistryProcess(log_path, zookeeper, extra=extra, ca=ca)
    try:
        yield registry.start()
    finally:
        registry.kill()


def own_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_hosts: str, name: str
                ) -> Iterator[DevCluster]:
    """A cluster in a fresh temporary directory ``name`` on the session's ZooKeeper (a chroot
    of its own)."""
    with DevCluster(tmp_path_factory.mktemp(name) / "dev", zookeeper=zookeeper_hosts) as cluster:
        yield cluster


def module_registry(tmp_path_factory: pytest.TempPathFactory, zookeeper: str, name: str
                    ) -> Iterator[RegistryProcess]:
    """A registry process on ``zookeeper``, logging into a fresh temporary directory ``name``."""
    with registry_process(tmp_path_factory.mktemp(name) / "registry.log", zookeeper) as process:
        yield process
