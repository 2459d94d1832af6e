"""A Kafka Connect distributed worker (``ConnectDistributed`` of the ``kafka`` jar set) for tests.

:class:`ConnectWorker` writes ``worker.properties`` into its work dir and runs the worker as a
child of the test process (``-Xmx512m``), stdout and stderr appended to ``worker.log`` in that
dir; the REST API listens on a free loopback port. The test stops (SIGTERM: Connect's shutdown
hook stops the herder and its tasks, which commit), kills (SIGKILL) and restarts it; the work dir
survives restarts. :meth:`ConnectWorker.put_connector` / :meth:`connector_status` use the REST API
(urllib, bounded by timeouts). Not thread-safe: drive it from the test's thread.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from loglake import jvm
from loglake.dev.harness import wait_until
from loglake.dev.net import LOOPBACK, free_port_block
from loglake.dev.zookeeper import find_java
from tests.child_process import LoggedChild

MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
HEAP = "-Xmx512m"
HTTP_TIMEOUT_S = 10.0

LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.kafka.connect=INFO
log4j.logger.org.reflections=ERROR
"""


class ConnectWorker(LoggedChild):
    """One distributed Connect worker with exactly-once source support enabled.

    ``topics_prefix`` names its config/offset/status topics (``<prefix>-configs`` etc.), which
    the worker creates compacted with replication factor ``replication_factor``; ``group``
    is its ``group.id``. Sink consumers read committed records only.
    """

    def __init__(self, work: Path, *, bootstrap: str, group: str, topics_prefix: str,
                 replication_factor: int = 3) -> None:
        super().__init__(work / "worker.log")
        self.work = work
        self.port = free_port_block(1)
        self.settings = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": f"{topics_prefix}-configs",
            "offset.storage.topic": f"{topics_prefix}-offsets",
            "status.storage.topic": f"{topics_prefix}-status",
            "config.storage.replication.factor": str(replication_factor),
            "offset.storage.replication.factor": str(replication_factor),
            "status.storage.replication.factor": str(replication_factor),
            "offset.storage.partitions": "5",
            "status.storage.partitions": "3",
            "exactly.once.source.support": "enabled",
            "consumer.isolation.level": "read_committed",
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://{LOOPBACK}:{self.port}",
            "rest.advertised.host.name": LOOPBACK,
            "rest.advertised.port": str(self.port),
            "plugin.discovery": "only_scan",
        }

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        properties = self.work / "worker.properties"
        properties.write_text("".join(f"{key}={value}\n" for key, value in self.settings.items()))
        log4j = self.work / "log4j.properties"
        log4j.write_text(LOG4J)
        classpath = f"{jvm.set_dir('kafka')}/*"
        command = [str(find_java()), HEAP, f"-Dlog4j.configuration=file:{log4j}", "-cp",
                   classpath, MAIN_CLASS, str(properties)]
        self._spawn(command)

    def wait_ready(self, *, timeout: float) -> None:
        """Wait (bounded) until the REST API answers ``GET /connectors``."""
        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"the Connect worker exited:\n{self.log_tail()}")
            try:
                self.request("GET", "/connectors")
            except (OSError, urllib.error.URLError):
                return False
            return True

        wait_until(ready, timeout, lambda: f"Connect REST API at {self.url}; log tail:\n"
                   f"{self.log_tail()}", interval=0.5)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def put_connector(self, name: str, config: dict[str, str], *, timeout: float) -> None:
        """Create or update connector ``name``; retried (bounded) while the worker is still
        joining its group (the REST API answers 409 or 5xx then)."""
        def put() -> bool:
            try:
                self.request("PUT", f"/connectors/{name}/config", config)
            except urllib.error.HTTPError as exc:
                if exc.code in (409, 500, 503):
                    return False
                raise AssertionError(f"PUT connector {name}: {exc.code} "
                                     f"{exc.read().decode(errors='replace')}") from None
            return True

        wait_until(put, timeout, lambda: f"connector {name} accepted; log tail:\n"
                   f"{self.log_tail()}", interval=1.0, ignore=(OSError,))

    def connector_status(self, name: str) -> dict[str, Any]:
        status: dict[str, Any] = self.request("GET", f"/connectors/{name}/status")
        return status

    def wait_connector_running(self, name: str, *, timeout: float) -> None:
        """The connector and each of its tasks report RUNNING (a FAILED task fails at once,
        with its trace)."""
        def running() -> bool:
            try:
                status = self.connector_status(name)
            except (OSError, urllib.error.URLError):
                return False
            tasks = status.get("tasks", [])
            failed = [task for task in tasks if task.get("state") == "FAILED"]
            if failed:
                raise AssertionError(f"connector {name} task failed: "
                                     f"{failed[0].get('trace', '')[:3000]}")
            return (status.get("connector", {}).get("state") == "RUNNING" and bool(tasks)
                    and all(task.get("state") == "RUNNING" for task in tasks))

        wait_until(running, timeout, lambda: f"connector {name} RUNNING; log tail:\n"
                   f"{self.log_tail()}", interval=0.5, ignore=(urllib.error.HTTPError,))
