"""Import rules between layers (issue 13), checked on the source with ``ast``.

* No module under ``loglake/broker/`` imports ``loglake.broker.broker`` except ``main.py``, the
  entry point: every part gets narrow dependencies, never the Broker.
* No module under ``loglake/catalog/`` imports ``loglake.streaming``: the Spark side may use the
  ZooKeeper layer, never the other way round.
* No module under ``loglake/broker/`` imports kazoo: kazoo types and exceptions stay inside
  ``loglake/catalog/`` (the broker talks to ZooKeeper through ``ClusterCatalog``); nor does
  the Spark side, the jobs, the SDK or ``loglake/segments/`` (only dev clusters besides).
* ``loglake/segments/`` imports nothing above it (broker, catalog, Spark side, jobs, SDK).
* Request handlers (``loglake/broker/handlers/``) import none of the broker's wiring and
  background parts (the broker, the controller, tiered storage, the ZooKeeper session, the
  topic sync, replica states, ISR manager and fetchers): they reach what they need through
  ``BrokerServices``.
* The replication parts (replica manager, replica states, fetchers, ISR manager, topic sync,
  dynamic configs) import neither the controller nor the group coordinator nor tiered storage:
  they take narrow callables and protocols instead.

Imports under ``if TYPE_CHECKING:`` count too: they are dependencies all the same.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "loglake"


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _offenders(package: str, forbidden: str, *, allowed: frozenset[str] = frozenset()
               ) -> list[str]:
    root = PACKAGE / package
    offenders = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in allowed:
            continue
        hits = sorted(name for name in _imports(path)
                      if name == forbidden or name.startswith(forbidden + "."))
        if hits:
            offenders.append(f"{relative}: {', '.join(hits)}")
    return offenders


def test_only_the_entry_point_imports_the_broker() -> None:
    assert _offenders("broker", "loglake.broker.broker",
                      allowed=frozenset({"broker/main.py"})) == []


def test_catalog_does_not_import_streaming() -> None:
    assert _offenders("catalog", "loglake.streaming") == []


def test_broker_does_not_import_kazoo() -> None:
    assert _offenders("broker", "kazoo") == []


def test_only_the_zookeeper_layer_and_dev_clusters_import_kazoo() -> None:
    """The Spark side, the jobs, the SDK and the tools reach ZooKeeper through the catalog
    (dev clusters create chroots and read their own state directly)."""
    for package in ("segments", "streaming", "compaction", "client"):
        assert _offenders(package, "kazoo") == [], package


PURE_SECURITY_MODULES = ("principal", "acl_model", "scram_credentials")


def test_tools_import_only_the_pure_security_modules() -> None:
    """The SDK, the CLI, the Spark side and the jobs may use the broker's pure security
    modules (principals, the ACL model, SCRAM credential forms), never its listeners, TLS
    contexts, SASL server or authorizer; client settings live in client/security.py."""
    for package in ("client", "streaming", "compaction"):
        hits = [hit for hit in _offenders(package, "loglake.broker.security")
                if any(name not in {f"loglake.broker.security.{m}" for m in
                                    PURE_SECURITY_MODULES}
                       and not any(name.startswith(f"loglake.broker.security.{m}.")
                                   for m in PURE_SECURITY_MODULES)
                       for name in hit.split(": ", 1)[1].split(", "))]
        assert hits == [], package


CONSOLE_BROKER_MODULES = ("loglake.broker.codec", "loglake.broker.security.principal",
                          "loglake.broker.security.acl_model")


def test_console_imports_only_the_pure_broker_modules() -> None:
    """The web console is a tool: SDK, catalog, config, errors; from the broker only the
    codec and the pure security modules; never kazoo, Spark or the jobs."""
    hits = [hit for hit in _offenders("console", "loglake.broker")
            if any(not any(name == m or name.startswith(m + ".")
                           for m in CONSOLE_BROKER_MODULES)
                   for name in hit.split(": ", 1)[1].split(", "))]
    assert hits == []
    for forbidden in ("kazoo", "loglake.streaming", "loglake.compaction", "loglake.dev",
                      "pyspark"):
        assert _offenders("console", forbidden) == [], forbidden


def test_segments_import_no_broker_catalog_or_spark_side() -> None:
    """The log and the tier formats depend on nothing above them."""
    for upper in ("loglake.broker", "loglake.catalog", "loglake.streaming",
                  "loglake.compaction", "loglake.client"):
        assert _offenders("segments", upper) == [], upper


TIER_MODULES = ("tiering", "tier_writer", "tier_reads", "tier_state", "local_retention",
                "table_changes", "tier_schemas")
HANDLERS_MAY_NOT_IMPORT = ("broker", "controller", "zk_session", "topic_sync", "replica_states",
                           "isr_manager", "fetcher_manager", "replica_fetcher", *TIER_MODULES)
REPLICATION_PARTS = ("replica_manager.py", "replica_states.py", "fetcher_manager.py",
                     "replica_fetcher.py", "isr_manager.py", "topic_sync.py", "dynamic_config.py",
                     "partition.py", "delayed_operations.py")


def test_handlers_import_no_wiring_or_background_part() -> None:
    offenders = []
    for module in HANDLERS_MAY_NOT_IMPORT:
        offenders += _offenders("broker/handlers", f"loglake.broker.{module}")
    assert offenders == []


def test_replication_parts_import_no_controller_coordinator_or_tier() -> None:
    forbidden = ("loglake.broker.controller", "loglake.broker.groups",
                 *(f"loglake.broker.{module}" for module in TIER_MODULES))
    offenders = []
    for name in REPLICATION_PARTS:
        path = PACKAGE / "broker" / name
        assert path.is_file(), name
        offenders += [f"{name}: {hit}" for hit in sorted(_imports(path))
                      if any(hit == f or hit.startswith(f + ".") for f in forbidden)]
    assert offenders == []


def test_the_registry_is_a_tool() -> None:
    """The schema registry reaches ZooKeeper through the catalog only, imports neither the
    Spark side, the jobs nor the SDK, and from the broker only the pure SCRAM credential
    forms (to check HTTP Basic passwords)."""
    assert (PACKAGE / "registry" / "service.py").is_file()
    for forbidden in ("kazoo", "loglake.streaming", "loglake.compaction", "loglake.client",
                      "loglake.segments"):
        assert _offenders("registry", forbidden) == [], forbidden
    hits = [hit for hit in _offenders("registry", "loglake.broker")
            if any(not name.startswith("loglake.broker.security.scram_credentials")
                   for name in hit.split(": ", 1)[1].split(", "))]
    assert hits == []


def test_the_rules_see_imports() -> None:
    """The checker itself: it finds a known import (main.py imports the broker)."""
    assert "loglake.broker.broker" in _imports(PACKAGE / "broker" / "main.py")
    assert _offenders("broker", "loglake.broker.broker") == [
        "broker/main.py: loglake.broker.broker, loglake.broker.broker.Broker"]


def test_keystores_is_a_leaf() -> None:
    """``loglake/keystores.py`` is shared by the broker, the SDK/CLI, the catalog and dev code,
    so it imports nothing of loglake's but the errors."""
    hits = sorted(name for name in _imports(PACKAGE / "keystores.py")
                  if name.startswith("loglake") and not name.startswith("loglake.errors"))
    assert hits == []


def test_properties_is_a_leaf() -> None:
    """``loglake/properties.py`` (Java properties text) is read by clients, tools and the
    ZooKeeper layer, so it imports nothing of loglake's."""
    assert not any(name.startswith("loglake") for name in _imports(PACKAGE / "properties.py"))
