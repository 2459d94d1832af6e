"""The ``spark`` jar set (loglake/jvm.py, jvm/spark/pom.xml) against PySpark's own jars, and the
pure-Parquet path of a machine without it.

In-process checks read the jars' entries (no JVM): one copy of each class on the classpath, and
every Jackson module of the set at PySpark's Jackson version. They need the fetched set and skip
only when ``jvm.available("spark")`` is false (``./run setup`` / ``./run test`` fetch it). The
missing-jars checks point ``LOGLAKE_JVM_DIR`` at an empty folder: no Spark settings, and a Spark
process started that way still reads a topic through ``format("loglake")`` (a child process: this
one's Spark JVM, if any, already holds the jars).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest

from loglake import jvm
from loglake.dev.harness import DevCluster
from loglake.streaming.session import (
    CLASSPATH_KEY,
    DELTA_SNAPSHOT_PARTITIONS,
    DELTA_SNAPSHOT_PARTITIONS_KEY,
    is_local_master,
    spark_configs,
)
from tests.admin_util import create_topic
from tests.spark_session import SMALL_SEGMENTS, produce_numbered, wait_tiered

needs_spark_set = pytest.mark.skipif(
    not jvm.available("spark"),
    reason="the spark jar set is not fetched (python -m loglake.jvm fetch spark)")

SPARK_STUB = "org/apache/spark/unused/UnusedStubClass.class"
"""Every Spark module jar (PySpark's and the Kafka connector's) carries this empty class."""


def _pyspark_jars() -> list[Path]:
    import pyspark

    return sorted((Path(pyspark.__file__).resolve().parent / "jars").glob("*.jar"))


def _classes(jar: Path) -> set[str]:
    with zipfile.ZipFile(jar) as archive:
        return {name for name in archive.namelist()
                if name.endswith(".class") and not name.startswith("META-INF/")
                and not name.endswith("module-info.class")}


@needs_spark_set
def test_no_class_of_the_set_is_also_in_pyspark_or_twice_in_the_set() -> None:
    owners: dict[str, list[str]] = defaultdict(list)
    for jar in _pyspark_jars():
        for name in _classes(jar):
            owners[name].append(f"pyspark/{jar.name}")
    ours = jvm.jars("spark")
    assert ours, "the fetched spark set holds no jars"
    duplicated: dict[str, list[str]] = {}
    for jar in ours:
        for name in _classes(jar) - {SPARK_STUB}:
            if owners[name]:
                duplicated[name] = [*owners[name], jar.name]
            owners[name].append(jar.name)
    assert not duplicated, sorted(duplicated.items())[:10]


@needs_spark_set
def test_jackson_modules_of_the_set_match_pyspark_jackson_databind() -> None:
    [databind] = [jar.name for jar in _pyspark_jars()
                  if jvm.artifact_of(jar.name) == "jackson-databind"]
    version = databind.removeprefix("jackson-databind-").removesuffix(".jar")
    jackson = [jar.name for jar in jvm.jars("spark") if jar.name.startswith("jackson-")]
    assert jackson, "delta-kernel-api needs jackson-datatype-jdk8"
    assert all(name.endswith(f"-{version}.jar") for name in jackson), (version, jackson)


@needs_spark_set
def test_the_set_has_what_delta_the_kafka_connector_and_s3a_need() -> None:
    artifacts = {jvm.artifact_of(jar.name) for jar in jvm.jars("spark")}
    assert {"delta-spark_2.13", "delta-storage", "spark-sql-kafka-0-10_2.13", "kafka-clients",
            "commons-pool2", "hadoop-aws", "bundle"} <= artifacts
    for master in ("local", "local[2]", "local[*]", "local[2,8]", "spark://h:7077", None):
        configs = spark_configs(master)
        assert str(configs["spark.sql.catalog.spark_catalog"]).endswith("DeltaCatalog")
        assert configs[DELTA_SNAPSHOT_PARTITIONS_KEY] == str(DELTA_SNAPSHOT_PARTITIONS)
        if is_local_master(master):
            # the only executor is the driver: its classpath, no copy per session
            assert "spark.jars" not in configs, master
            classpath = str(configs[CLASSPATH_KEY]).split(os.pathsep)
            assert sorted(classpath) == sorted(jvm.spark_jars())
        else:
            # executors elsewhere get the jars shipped
            assert CLASSPATH_KEY not in configs, master
            assert sorted(str(configs["spark.jars"]).split(",")) == sorted(jvm.spark_jars())


_LOCAL_SESSION = textwrap.dedent("""
    import json, sys
    from loglake.streaming.session import delta_enabled, s3a_available
    from loglake.streaming.sql_cli import quiet_session
    spark = quiet_session("local[1]")
    table = sys.argv[1]
    spark.range(5).write.format("delta").save(table)
    result = {
        "delta": delta_enabled(spark),
        "s3a": s3a_available(spark),
        "rows": spark.read.format("delta").load(table).count(),
        "history": spark.sql(f"DESCRIBE HISTORY delta.`{table}`").count(),
        "kafka": spark._jvm.java.lang.Class.forName(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider").getName(),
    }
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()
""")


@needs_spark_set
@pytest.mark.xdist_group("spark")
def test_a_local_session_uses_the_jars_without_copying_them(tmp_path: Path) -> None:
    """Regression: with ``spark.jars`` every local session copied each jar (700 MB of AWS SDK)
    into its temporary directory, and sessions of killed processes left theirs behind, which
    filled a CI disk. A local session now loads them from the driver's classpath."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "TMPDIR": str(scratch), "SPARK_LOCAL_DIRS": str(scratch)}
    done = subprocess.run([sys.executable, "-c", _LOCAL_SESSION, str(tmp_path / "t")],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")] or [""]
    assert done.returncode == 0 and line, done.stderr[-3000:]
    result = json.loads(line.removeprefix("RESULT "))
    assert result == {"delta": True, "s3a": True, "rows": 5, "history": 1,
                      "kafka": "org.apache.spark.sql.kafka010.KafkaSourceProvider"}
    copied = [path for path in scratch.rglob("*.jar")]
    assert copied == [], copied
    used = sum(path.stat().st_size for path in scratch.rglob("*") if path.is_file())
    assert used < 20_000_000, used


def test_an_empty_jvm_dir_means_no_spark_settings(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOGLAKE_JVM_DIR", str(tmp_path))
    assert not jvm.available("spark")
    assert jvm.spark_jars() == []
    assert spark_configs() == {}
    # a set whose fetch did not finish (no .complete marker) counts as absent
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "delta-spark_2.13-4.4.0.jar").write_bytes(b"")
    assert spark_configs() == {}


def test_without_maven_fetch_gives_a_one_line_message(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "LOGLAKE_JVM_DIR": str(tmp_path), "PATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "loglake.jvm", "fetch", "spark"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Maven (mvn) is not installed" in lines[0], done.stderr
    assert "Parquet files" in lines[0]
    optional = subprocess.run(
        [sys.executable, "-m", "loglake.jvm", "fetch", "--optional", "spark"],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert optional.returncode == 0 and len(optional.stderr.strip().splitlines()) == 1


_PURE_PARQUET_READ = textwrap.dedent("""
    import json, sys
    from loglake.streaming.session import delta_enabled, spark_configs
    from loglake.streaming.sql_cli import quiet_session
    from loglake.streaming import register
    from loglake.streaming.sql_views import topic_frame
    zookeeper, topic = sys.argv[1], sys.argv[2]
    assert spark_configs() == {}, spark_configs()
    spark = quiet_session("local[1]")
    register(spark)
    source = (spark.read.format("loglake").option("zookeeper", zookeeper)
              .option("subscribe", topic).load())
    view = topic_frame(spark, topic, zookeeper=zookeeper)
    result = {
        "delta": delta_enabled(spark),
        "jars": spark.conf.get("spark.jars", ""),
        "source": sorted(int(r[0]) for r in source.selectExpr("CAST(value AS STRING)").collect()),
        "view": sorted(int(r[0]) for r in view.selectExpr("CAST(value AS STRING)").collect()),
    }
    spark.stop()
    print("RESULT " + json.dumps(result))
""")


@pytest.mark.xdist_group("spark")
def test_without_the_jars_format_loglake_still_reads_the_tier(
        cluster: DevCluster, tmp_path: Path) -> None:
    topic = f"nojars.{uuid.uuid4().hex[:8]}"
    create_topic(cluster.bootstrap_servers, topic, 2, SMALL_SEGMENTS)
    produce_numbered(cluster.bootstrap_servers, topic, 0, 1200, partitions=2)
    wait_tiered(cluster.zookeeper_connect, topic, {0: 200, 1: 200})
    empty = tmp_path / "no-jvm"
    empty.mkdir()
    env = {**os.environ, "LOGLAKE_JVM_DIR": str(empty),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run([sys.executable, "-c", _PURE_PARQUET_READ,
                           cluster.zookeeper_connect, topic],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")] or [""]
    assert done.returncode == 0 and line, done.stderr[-3000:]

    result = json.loads(line.removeprefix("RESULT "))
    assert result["delta"] is False and ".jvm" not in result["jars"]
    assert result["source"] == list(range(1200))
    assert result["view"] == list(range(1200))


@pytest.mark.parametrize(("jar", "artifact"), [
    ("delta-spark_2.13-4.4.0.jar", "delta-spark_2.13"),
    ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "spark-sql-kafka-0-10_2.13"),
    ("wildfly-openssl-2.2.5.Final.jar", "wildfly-openssl"),
    ("zstd-jni-1.5.7-3.jar", "zstd-jni"),
    ("foo-5.jar", "foo"),
    ("plain.jar", "plain"),
])
def test_artifact_of_strips_only_the_version(jar: str, artifact: str) -> None:
    assert jvm.artifact_of(jar) == artifact
