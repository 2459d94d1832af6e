"""The Kafka Streams scenario jar (``jvm/streams``) for tests: build, run commands, instances.

``streams_jar`` (session fixture) builds ``jvm/streams`` with ``mvn -q -B package`` into
``jvm/streams/target/loglake-streams.jar`` (git-ignored) once for all pytest workers
(:func:`tests.jvm_build.build_jar`: only when a source is newer than the jar). It skips the
test only when the fetched ``kafka`` jar set (``python -m loglake.jvm fetch kafka``, which
``./run test`` does) is absent: the jar runs on kafka-streams and kafka-clients from that set.

:func:`run_command` runs ``produce`` or ``verify`` to its end (bounded) and returns the JSON it
printed; :class:`StreamsInstance` is one Kafka Streams process of the topology (``run``), a
child of the test process with stdout (JSON state events) and stderr (its log) in one file, which
the test SIGKILLs, restarts and stops. JVM heaps are small (``-Xmx256m``): the box is shared.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loglake import jvm
from loglake.dev.harness import wait_until
from loglake.dev.zookeeper import find_java
from tests.child_process import LoggedChild
from tests.jvm_build import build_jar

PROJECT = Path(__file__).resolve().parent.parent / "jvm" / "streams"
JAR = PROJECT / "target" / "loglake-streams.jar"
MAIN_CLASS = "loglake.streams.Main"
HEAP = "-Xmx256m"


@pytest.fixture(scope="session")
def streams_jar() -> Path:
    if not jvm.available("kafka"):
        pytest.skip("the kafka jar set is not fetched (python -m loglake.jvm fetch kafka; "
                    "./run test does it): the Streams scenarios run on its kafka-streams")
    return build_jar(PROJECT, JAR.name)


def java_command(jar: Path, command: str, **options: Any) -> list[str]:
    """``java -cp <jar>:<kafka set>/* loglake.streams.Main COMMAND --name value ...``
    (option names with ``_`` become ``-``)."""
    classpath = f"{jar}{os.pathsep}{jvm.set_dir('kafka')}{os.sep}*"
    args = [item for name, value in options.items()
            for item in (f"--{name.replace('_', '-')}", str(value))]
    return [str(find_java()), HEAP, "-cp", classpath, MAIN_CLASS, command, *args]


def run_command(jar: Path, command: str, *, timeout: float, **options: Any) -> dict[str, Any]:
    """Run ``produce`` / ``verify`` to its end and return the last JSON object it printed.
    AssertionError with its stderr tail when it fails, prints nothing or overruns (killed)."""
    try:
        done = subprocess.run(java_command(jar, command, **options), capture_output=True,
                              text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        raise AssertionError(f"{command} overran {timeout:.0f} s; stderr tail:\n"
                             f"{stderr[-3000:]}") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise AssertionError(f"{command} failed (exit {done.returncode}); stderr tail:\n"
                             f"{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


class StreamsInstance(LoggedChild):
    """One Kafka Streams process of the word-count-with-join topology (``Main run``).

    Its state dir (``<work>/state``) survives kills and restarts, as a real deployment's disk
    does. :meth:`stop` lets Streams close cleanly; :meth:`kill` leaves its open transaction
    open, as a crash does. Not thread-safe: drive it from the test's thread.
    """

    stop_timeout_s = 40.0

    def __init__(self, jar: Path, work: Path, *, bootstrap: str, prefix: str,
                 application_id: str, standby: int, replication_factor: int = 3) -> None:
        super().__init__(work / "streams.log")
        self.work = work
        self._command = java_command(
            jar, "run", bootstrap=bootstrap, prefix=prefix, application_id=application_id,
            state_dir=work / "state", standby=standby, replication_factor=replication_factor)
        self._log_start = 0

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._spawn(self._command)

    def events(self) -> list[dict[str, Any]]:
        """The JSON events printed since the last start."""
        with open(self.log_path, "rb") as log:
            log.seek(self._log_start)
            text = log.read().decode(errors="replace")
        return [json.loads(line) for line in text.splitlines()
                if line.startswith('{"event"')]

    def state(self) -> str | None:
        states = [event["state"] for event in self.events() if event["event"] == "state"]
        return states[-1] if states else None

    def wait_running(self, *, timeout: float) -> None:
        """Wait (bounded) until the instance reports RUNNING; AssertionError with its log tail
        when it exits or errs first or the bound passes."""
        def running() -> bool:
            errors = [event for event in self.events() if event["event"] == "error"]
            if errors or not self.alive():
                raise AssertionError(f"Streams instance failed: {errors}\n{self.log_tail()}")
            return self.state() == "RUNNING"

        wait_until(running, timeout, lambda: f"Streams instance RUNNING (state "
                   f"{self.state()}); log tail:\n{self.log_tail()}", interval=0.2)
