"""The Java interop jar (``jvm/interop``): built once per test session, scenarios run from tests.

``interop_jar`` (session fixture) builds ``jvm/interop`` with ``mvn -q -B package`` into
``jvm/interop/target/loglake-interop.jar`` (git-ignored) once for all pytest workers
(:func:`tests.jvm_build.build_jar`: only when a source is newer than the jar). It skips the
test only when the fetched ``kafka`` jar set (``python -m loglake.jvm fetch kafka``, which
``./run test`` does) is absent: the jar is run against kafka-clients from that set.

:func:`run_scenario` runs one scenario (``java -cp <jar>:<kafka set>/* loglake.interop.Interop``)
bounded by a timeout and returns the JSON object it printed last on stdout; :func:`start_scenario`
starts one for tests that fault the cluster while it runs (:func:`scenario_result` collects it).
The JVM heap is small (``-Xmx256m``): the box is shared.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loglake import jvm
from tests.jvm_build import build_jar

PROJECT = Path(__file__).resolve().parent.parent / "jvm" / "interop"
JAR = PROJECT / "target" / "loglake-interop.jar"
MAIN_CLASS = "loglake.interop.Interop"


@pytest.fixture(scope="session")
def interop_jar() -> Path:
    if not jvm.available("kafka"):
        pytest.skip("the kafka jar set is not fetched (python -m loglake.jvm fetch kafka; "
                    "./run test does it): the Java interop scenarios run on its kafka-clients")
    return build_jar(PROJECT, JAR.name)


def _command(jar: Path, scenario: str, bootstrap: str, values: dict[str, Any]) -> list[str]:
    classpath = f"{jar}{os.pathsep}{jvm.set_dir('kafka')}{os.sep}*"
    return ["java", "-Xmx256m", "-cp", classpath, MAIN_CLASS, scenario,
            "--bootstrap", bootstrap, *(f"{key}={value}" for key, value in values.items())]


def start_scenario(jar: Path, scenario: str, bootstrap: str, **values: Any
                   ) -> subprocess.Popen[str]:
    """Start a scenario; collect it with :func:`scenario_result`."""
    return subprocess.Popen(_command(jar, scenario, bootstrap, values), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def scenario_result(process: subprocess.Popen[str], *, timeout: float) -> dict[str, Any]:
    """Wait (bounded) for a started scenario and return its JSON result; AssertionError with the
    tail of its stderr when it failed, printed nothing parseable, or overran (it is killed)."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate(timeout=30)
        raise AssertionError(f"scenario overran {timeout:.0f} s; stderr tail:\n"
                             f"{stderr[-3000:]}") from None
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise AssertionError(f"scenario printed no result (exit {process.returncode}); "
                             f"stderr tail:\n{stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if process.returncode != 0 or "error" in result:
        raise AssertionError(f"scenario failed (exit {process.returncode}): "
                             f"{result.get('error')}\nstderr tail:\n{stderr[-3000:]}")
    return result


def run_scenario(jar: Path, scenario: str, bootstrap: str, *, timeout: float = 180.0,
                 **values: Any) -> dict[str, Any]:
    """Run a scenario to its end (bounded by ``timeout`` seconds) and return its result."""
    return scenario_result(start_scenario(jar, scenario, bootstrap, **values), timeout=timeout)
