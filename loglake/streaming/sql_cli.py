"""``loglake sql "SELECT ..."``: run one Spark SQL query over the cluster's topics.

::

    loglake sql "SELECT partition, count(*) FROM \\`orders.v1\\` GROUP BY partition" \\
        [--zookeeper 127.0.0.1:10092/loglake] [--format table|json|csv] [--max-rows N]
        [--isolation-level read_committed|read_uncommitted]

Every topic whose name occurs in the query text is registered as a view first
(streaming/sql_views.py: tiered rows read natively from the Delta table, plus the hot tail from the
brokers); quote names holding ``.`` or ``-`` with backticks. ``--zookeeper`` is resolved by
:mod:`loglake.addresses` (flag, ``$LOGLAKE_ZOOKEEPER``, the profile of ``loglake dev up``);
``--bootstrap-server`` (flag only: the environment's brokers might belong to another cluster
than the flag's ZooKeeper) overrides the brokers registered in ZooKeeper. ``--command-config
FILE``: Kafka client properties for the brokers (``security.protocol``, ``sasl.*``, ``ssl.*``;
default ``$LOGLAKE_COMMAND_CONFIG``, else the file of a secured ``loglake dev up`` when the
cluster comes from its profile), given to the hot-tail reads as Spark's ``kafka.*`` options;
the brokers registered in ZooKeeper are then contacted on their listener of that protocol.

``--isolation-level`` (default ``read_committed``, as ``loglake consume``): what the views'
hot tail shows (sql_views.py). ``read_committed`` reads up to each partition's last stable
offset and skips aborted records, so the answer holds committed records only (the tiered side
always does); ``read_uncommitted`` also shows the records of open and aborted transactions not
tiered yet.

Output (stdout): ``table`` aligned columns (cells longer than ``--max-width`` are cut with
``...``), ``json`` one object per row (JSON Lines), ``csv`` a header line and the rows. Binary
values are printed as UTF-8 text when they decode, otherwise as ``base64:<data>``; timestamps
are ISO 8601 in UTC; arrays and structs as JSON. At most ``--max-rows`` rows (default 1000) are
printed; a note on stderr says when more were available.

Spark runs in this process (``--master``, default ``local[*]``) with its logging at ERROR, no UI
and no progress bar, so the terminal only shows results. Errors (bad SQL, unknown topic,
unreachable cluster) are one ``loglake: error: ...`` line and exit status 1.
"""

from __future__ import annotations

import argparse
import base64
import csv
import datetime as dt
import json
import logging
import os
import sys
import tempfile
from collections.abc import Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from loglake import addresses
from loglake.client.security import (
    SecurityConfig,
    add_command_config_option,
    command_config_path,
    read_properties,
)
from loglake.errors import LoglakeError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_PYSPARK_ERROR_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
DEFAULT_MAX_ROWS = 1000
ZOOKEEPER_TIMEOUT_S = 10.0
DEFAULT_MAX_WIDTH = 80
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")


class SqlError(LoglakeError):
    """Spark refused or failed the query (parse or analysis error, failed job)."""

    code = ErrorCode.invalid_request


_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
logger.apache.name = org.apache
logger.apache.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""
"""Spark's log4j2 setup for the CLI: errors only. ``org.apache`` is configured explicitly at
the root's level: Spark prints "Setting default log level" when the level it derives for the
shell (from the nearest configured logger) differs from the root's."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``sql`` to the ``loglake`` command."""
    parser = subparsers.add_parser(
        "sql", help="run a Spark SQL query over topics (tier + hot tail)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("query", help="the SQL; topics are tables named after them")
    addresses.add_zookeeper_option(parser)
    parser.add_argument("--bootstrap-server", default=None, metavar="HOST:PORT",
                        help="brokers to read the hot tail from (default: those registered "
                        "in ZooKeeper)")
    add_command_config_option(parser)
    parser.add_argument("--format", choices=("table", "json", "csv"), default="table")
    parser.add_argument("--max-rows", type=_positive_int, default=DEFAULT_MAX_ROWS, metavar="N",
                        help=f"print at most N rows (default {DEFAULT_MAX_ROWS})")
    parser.add_argument("--max-width", type=_positive_int, default=DEFAULT_MAX_WIDTH,
                        metavar="N", help="cut table cells after N characters "
                        f"(default {DEFAULT_MAX_WIDTH})")
    parser.add_argument("--isolation-level", choices=ISOLATION_LEVELS,
                        default="read_committed",
                        help="read_committed (default): only committed records; "
                        "read_uncommitted: also those of open and aborted transactions")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.set_defaults(handler=run_sql)


def run_sql(args: argparse.Namespace) -> int:
    """``loglake sql QUERY``."""
    from pyspark.errors import PySparkException

    from loglake.streaming.offsets import ClusterView
    from loglake.streaming.session import delta_enabled
    from loglake.streaming.spark_catalog import register_tables
    from loglake.streaming.sql_views import register_topics

    logging.getLogger("kazoo").addHandler(logging.NullHandler())  # errors are raised instead
    resolved = addresses.resolve("zookeeper", args.zookeeper)
    zookeeper = resolved.address
    kafka_options = _kafka_options(args, from_profile=resolved.source == "profile")
    view = ClusterView.for_cluster(zookeeper=zookeeper,
                                   bootstrap_servers=args.bootstrap_server,
                                   timeout=ZOOKEEPER_TIMEOUT_S)
    try:  # before starting Spark, so a wrong address fails fast
        catalog = view.catalog()
        assert catalog is not None
        topics = catalog.topic_names()
        named = referenced_topics(args.query, topics)
        tables = referenced_tables(args.query, topics)
    finally:
        view.close()
    from pyspark.sql import SparkSession

    owned = SparkSession.getActiveSession() is None  # else: a caller's session, left running
    spark = quiet_session(args.master)
    try:
        register_topics(spark, zookeeper=zookeeper, topics=named,
                        bootstrap_servers=args.bootstrap_server,
                        isolation_level=args.isolation_level, kafka_options=kafka_options)
        if tables and delta_enabled(spark):  # loglake.<name>: the Delta tables (time travel)
            register_tables(spark, zookeeper=zookeeper, topics=tables)
        try:
            frame = spark.sql(args.query)
            columns = list(frame.columns)
            rows = [list(row) for row in frame.limit(args.max_rows + 1).collect()]
        except PySparkException as exc:
            raise SqlError(describe_spark_error(exc)) from None
    finally:
        if owned:
            spark.stop()
    more = len(rows) > args.max_rows
    rows = rows[: args.max_rows]
    write_rows(columns, rows, args.format, sys.stdout, max_width=args.max_width)
    if more:
        print(f"loglake: showing the first {args.max_rows} rows; there are more "
              "(--max-rows)", file=sys.stderr)
    return 0


def _kafka_options(args: argparse.Namespace, *, from_profile: bool) -> dict[str, str]:
    """The client properties of ``--command-config`` (else ``$LOGLAKE_COMMAND_CONFIG``, else the
    dev profile's file when the cluster comes from the profile and no --bootstrap-server names
    other brokers), checked here so a bad file fails before Spark starts."""
    path = command_config_path(args.command_config,
                               bootstrap_from_profile=from_profile and not args.bootstrap_server)
    if path is None:
        return {}
    properties = read_properties(path)
    SecurityConfig.from_properties(properties)
    return properties


def quiet_session(master: str) -> SparkSession:
    """A SparkSession that logs only errors (to stderr) and shows no UI or progress bar (the
    active session instead, when this process already runs one)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from loglake.streaming.session import spark_configs

    config = tempfile.NamedTemporaryFile(  # noqa: SIM115 - must outlive the JVM start
        "w", prefix="loglake-log4j2-", suffix=".properties", delete=False)
    with config:
        config.write(_LOG4J2)
    try:
        session = (
            SparkSession.builder.master(master)
            .appName("loglake-sql")
            .config("spark.driver.extraJavaOptions",
                    f"-Dlog4j2.configurationFile=file:{config.name}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config(map=spark_configs(master))
            .getOrCreate()
        )
    finally:
        os.unlink(config.name)
    session.sparkContext.setLogLevel("ERROR")
    from pyspark.logger import PySparkLogger

    for name in _PYSPARK_ERROR_LOGGERS:  # they print each failed query as JSON on stderr
        PySparkLogger.getLogger(name).disabled = True
    return session


def referenced_tables(query: str, topics: Sequence[str]) -> list[str]:
    """Topics whose catalog table (``loglake.<name>``, streaming/spark_catalog.py) the query
    names (a superset: the qualified name appears verbatim)."""
    from loglake.streaming.spark_catalog import DEFAULT_DATABASE, table_names

    lowered = query.lower()
    return [topic for topic, name in table_names(topics).items()
            if f"{DEFAULT_DATABASE}.{name}" in lowered]


def referenced_topics(query: str, topics: Sequence[str]) -> list[str]:
    """Topics whose name occurs in ``query`` (a superset of those it reads: a table name
    appears verbatim, quoted or not)."""
    return [t for t in topics if t in query]


def describe_spark_error(exc: Exception) -> str:
    """One line for an error from Spark: the Python exception raised in a data source
    worker when there is one (``SourceOptionError: ...``), else Spark's first line."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception")) and "." in head and ":" in line:
            return line
    return lines[0] if lines else type(exc).__name__


# -- output ----------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A JSON-compatible form of a Spark value."""
    from pyspark.sql import Row

    if isinstance(value, bytes | bytearray):
        data = bytes(value)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "base64:" + base64.b64encode(data).decode("ascii")
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _text(value: Any, null: str) -> str:
    plain = _plain(value)
    if plain is None:
        return null
    if isinstance(plain, dict | list):
        return json.dumps(plain, ensure_ascii=False)
    return str(plain)


def write_rows(columns: list[str], rows: list[list[Any]], form: str, out: Any, *,
               max_width: int = DEFAULT_MAX_WIDTH) -> None:
    """Print ``rows`` as ``table``, ``json`` (JSON Lines) or ``csv``."""
    if form == "json":
        for row in rows:
            record = {c: _plain(v) for c, v in zip(columns, row, strict=True)}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    if form == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        writer.writerows([_text(v, "") for v in row] for row in rows)
        return
    cells = [[_cut(_text(v, "NULL"), max_width) for v in row] for row in rows]
    table = [columns, *cells]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    out.write("\n".join(lines) + "\n")
    out.write(f"({len(rows)} row{'s' if len(rows) != 1 else ''})\n")


def _cut(text: str, width: int) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: max(width - 3, 1)] + "..."


def _positive_int(text: str) -> int:
    number = int(text)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected an integer > 0, got {text!r}")
    return number
