"""Import rules between layers (issue 13), checked on the source with ``ast``.

* No module under ``loglake/broker/`` imports ``loglake.broker.broker`` except ``main.py``, the
  entry point: every part gets narrow dependencies, never the Broker.
* No module under ``loglake/catalog/`` imports ``loglake.streaming``: the Spark side may use the
  ZooKeeper layer, never the other way round.
* No module under ``loglake/broker/`` imports kazoo: kazoo types and exceptions stay inside
  ``loglake/catalog/`` (the broker talks to ZooKeeper through ``ClusterCatalog``).

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


def test_the_rules_see_imports() -> None:
    """The checker itself: it finds a known import (main.py imports the broker)."""
    assert "loglake.broker.broker" in _imports(PACKAGE / "broker" / "main.py")
    assert _offenders("broker", "loglake.broker.broker") == [
        "broker/main.py: loglake.broker.broker, loglake.broker.broker.Broker"]
