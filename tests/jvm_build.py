"""Build a Maven project under ``jvm/`` once for all pytest workers (the scenario jars).

:func:`build_jar` runs ``mvn -q -B -f <project>/pom.xml package`` unless the jar is newer than
the project's Maven file, every file under its ``src/`` and the sources the scenario jars share
(``jvm/common/src``, a second source root in their Maven files); the jar lands in
``<project>/target/`` (git-ignored). An exclusive file lock (``<project>/target/.build.lock``)
serialises the builds of several pytest workers: the first builds, the others wait and find the
jar up to date. Build failures raise RuntimeError with the tail of Maven's output.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

BUILD_TIMEOUT_S = 300.0
SHARED_SOURCES = Path(__file__).resolve().parent.parent / "jvm" / "common" / "src"


def _stale(project: Path, jar: Path) -> bool:
    if not jar.is_file():
        return True
    built = jar.stat().st_mtime
    sources = [project / "pom.xml",
               *sorted(path for root in (project / "src", SHARED_SOURCES)
                       for path in root.rglob("*") if path.is_file())]
    return any(path.stat().st_mtime > built for path in sources)


def build_jar(project: Path, jar: str) -> Path:
    """Build ``project`` (a Maven project directory) unless ``<project>/target/<jar>`` is up to
    date; return the jar's path. RuntimeError when Maven is missing or the build fails."""
    name = f"jvm/{project.name}"
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError(f"Maven (mvn) is not installed: cannot build {name}")
    target = project / "target"
    path = target / jar
    target.mkdir(exist_ok=True)
    with open(target / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stale(project, path):
            done = subprocess.run([mvn, "-q", "-B", "-f", str(project / "pom.xml"), "package"],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                  check=False)
            if done.returncode != 0 or not path.is_file():
                raise RuntimeError(f"mvn package of {name} failed (exit {done.returncode}):"
                                   f"\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return path
