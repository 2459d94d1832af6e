"""The JVM jars loglake uses beside PySpark's own, fetched with Maven at set-up.

Sets (each a Maven file under ``jvm/<set>/pom.xml`` in the source tree):

- ``spark``: delta-spark + delta-storage, Spark's Kafka connector (spark-sql-kafka-0-10 with its
  kafka-clients), hadoop-aws + the AWS SDK bundle. Put on every SparkSession loglake builds
  (:func:`spark_jars`); without them loglake reads tables through their Parquet files.
- ``kafka``: Apache Kafka 3.9 (broker, tools, Streams, Connect) as a test and benchmark peer.

Layout on disk: ``<jvm dir>/<set>/*.jar`` plus ``<jvm dir>/<set>/.complete`` (written last, after
every jar is in place: a set without it is treated as absent). The jvm dir is
``$LOGLAKE_JVM_DIR`` or ``.jvm/`` beside the ``loglake`` package in a source checkout (git-ignored).

Fetching goes through the machine's Maven and its configured repositories and mirrors, never
Spark's Ivy resolver (``spark.jars.packages``), which ignores them. Jars of the ``spark`` set whose
artifact PySpark already ships (``pyspark/jars``) are dropped so one copy of each class is on the
classpath. Fetches are idempotent; a machine without Maven (or without access to the repository)
gets a one-line message and loglake keeps its pure-Parquet path.

Thread safety: module-level functions only; :func:`fetch` is meant for one process at a time
(set-up), readers only look for ``.complete``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

SETS = ("spark", "kafka")
_SOURCE_ROOT = Path(__file__).resolve().parent.parent
_COMPLETE = ".complete"
_VERSIONED = re.compile(r"^(?P<artifact>.+?)-\d+(?:\.\d+)+[\w.\-+]*\.jar$")
"""``<artifact>-<dotted version>[qualifier].jar``; the version is the first ``-<n>.<n>`` part, so
artifact names holding ``-<n>`` (``spark-sql-kafka-0-10_2.13``) stay whole."""
_VERSIONED_LOOSE = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-+]*\.jar$")
"""Fallback for versions without a dot (``foo-5.jar``)."""


class JvmDepsError(RuntimeError):
    """A set could not be fetched (no Maven, no repository access, or no Maven file)."""


def jvm_dir() -> Path:
    """Where fetched jar sets live (``$LOGLAKE_JVM_DIR`` or ``.jvm`` in the source tree)."""
    configured = os.environ.get("LOGLAKE_JVM_DIR")
    return Path(configured) if configured else _SOURCE_ROOT / ".jvm"


def pom_file(name: str) -> Path:
    """The Maven file that lists set ``name``."""
    if name not in SETS:
        raise ValueError(f"unknown jar set {name!r} (known: {', '.join(SETS)})")
    return _SOURCE_ROOT / "jvm" / name / "pom.xml"


def set_dir(name: str) -> Path:
    """The folder holding set ``name``'s jars (may not exist yet)."""
    pom_file(name)
    return jvm_dir() / name


def available(name: str) -> bool:
    """True when set ``name`` was fetched completely."""
    return (set_dir(name) / _COMPLETE).is_file()


def jars(name: str) -> list[Path]:
    """Set ``name``'s jars, sorted by file name; empty when the set is not fetched."""
    if not available(name):
        return []
    return sorted(set_dir(name).glob("*.jar"))


def spark_jars() -> list[str]:
    """Absolute paths of the ``spark`` set, for ``spark.jars`` (empty when not fetched)."""
    return [str(path) for path in jars("spark")]


def artifact_of(jar_name: str) -> str:
    """``delta-spark_2.13-4.4.0.jar`` -> ``delta-spark_2.13``,
    ``spark-sql-kafka-0-10_2.13-4.2.0.jar`` -> ``spark-sql-kafka-0-10_2.13`` (the name without
    its version)."""
    match = _VERSIONED.match(jar_name) or _VERSIONED_LOOSE.match(jar_name)
    return match.group("artifact") if match else jar_name.removesuffix(".jar")


def _pyspark_artifacts() -> set[str]:
    import pyspark

    shipped = Path(pyspark.__file__).resolve().parent / "jars"
    return {artifact_of(path.name) for path in shipped.glob("*.jar")}


def fetch(name: str, *, quiet: bool = True) -> Path:
    """Fetch set ``name`` with Maven into :func:`set_dir` (no-op when already complete and no
    older than its Maven file). Raises :class:`JvmDepsError` with a one-line reason."""
    pom = pom_file(name)
    target = set_dir(name)
    marker = target / _COMPLETE
    if marker.is_file() and pom.is_file() and marker.stat().st_mtime >= pom.stat().st_mtime:
        return target
    if not pom.is_file():
        raise JvmDepsError(f"no Maven file for the {name} jars ({pom.name} is in a source "
                           "checkout only); set LOGLAKE_JVM_DIR to a folder holding them")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JvmDepsError(f"Maven (mvn) is not installed: cannot fetch the {name} jars")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        command = [mvn, "-B", "-f", str(pom), "dependency:copy-dependencies",
                   f"-DoutputDirectory={staging}", "-DincludeScope=runtime"]
        if quiet:
            command.insert(1, "-q")
        done = subprocess.run(command, capture_output=quiet, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout or "").strip().splitlines()[-1:] if quiet else []
            raise JvmDepsError(f"Maven could not fetch the {name} jars (exit "
                               f"{done.returncode}){': ' + tail[0] if tail else ''}")
        if name == "spark":
            shipped = _pyspark_artifacts()
            for path in staging.glob("*.jar"):
                if artifact_of(path.name) in shipped:
                    path.unlink()
        (staging / _COMPLETE).write_text("\n".join(sorted(p.name for p in staging.glob("*.jar"))))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m loglake.jvm fetch SET...`` (set-up) and ``python -m loglake.jvm path SET``."""
    parser = argparse.ArgumentParser(prog="python -m loglake.jvm")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_parser = sub.add_parser("fetch", help="fetch jar sets with Maven")
    fetch_parser.add_argument("sets", nargs="+", choices=SETS)
    fetch_parser.add_argument("--optional", action="store_true",
                              help="report a failure and exit 0 (loglake works without them)")
    path_parser = sub.add_parser("path", help="print a fetched set's folder")
    path_parser.add_argument("set", choices=SETS)
    args = parser.parse_args(argv)
    if args.command == "path":
        if not available(args.set):
            print(f"loglake: the {args.set} jars are not fetched", file=sys.stderr)
            return 1
        print(set_dir(args.set))
        return 0
    status = 0
    for name in args.sets:
        try:
            fetch(name)
        except JvmDepsError as exc:
            suffix = " (loglake reads Delta tables through their Parquet files without them)" \
                if name == "spark" else ""
            print(f"loglake: {exc}{suffix}", file=sys.stderr)
            status = 0 if args.optional else 1
    return status


if __name__ == "__main__":
    sys.exit(main())
