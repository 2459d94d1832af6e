"""JSON Schema compatibility, by hand (no maintained library decides it).

"Can a reader with schema R read what a writer with schema W wrote" is approximated as "does R
accept every document W accepts", checked structurally. The subset checked (error types are
Confluent's names where it has one):

- ``type``: every type W allows must be allowed by R; ``integer`` is accepted where ``number``
  is (widening integer → number is backward compatible, the reverse is not):
  TYPE_NARROWED / TYPE_CHANGED. A schema without ``type`` allows every type.
- objects: a property R declares and W does not, while W's content model is open
  (``additionalProperties`` absent or true): PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL (W may have
  written anything under that name), unless R's property schema accepts anything; with W's
  ``additionalProperties`` a schema, R's property must accept that schema. A property W
  declares and R does not, while R is closed (``additionalProperties: false``):
  PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL; R's ``additionalProperties`` a schema: it must
  accept W's property. R closing an open W: ADDITIONAL_PROPERTIES_REMOVED. Properties both
  declare are compared recursively (nested objects, arrays, ...).
- ``required``: a name R requires that W did not: REQUIRED_ATTRIBUTE_ADDED.
- ``enum``: W's values must all be in R's: ENUM_ARRAY_NARROWED (R adding an enum W lacked:
  ENUM_ARRAY_ADDED); ``const`` likewise (CONST_CHANGED / CONST_ADDED).
- arrays: ``items`` compared recursively (a list of items pairwise): ITEMS_*; ``minItems``
  raised / ``maxItems`` lowered / ``uniqueItems`` added: *_ITEMS_* narrowed.
- strings and numbers: ``minLength``/``maxLength``, ``minimum``/``maximum`` (and exclusive
  forms) narrowed, ``pattern``/``multipleOf``/``format`` added or changed.
- ``oneOf``/``anyOf``: every W branch must be accepted by some R branch
  (COMBINED_TYPE_SUBSCHEMAS_CHANGED); ``allOf`` compared pairwise when it has the same length.
- ``$ref``: local pointers (``#/...``) and references (by their names) are followed, with a
  depth bound (recursive schemas compare as compatible once a pair repeats).
- Boolean schemas: R ``true`` accepts anything; W ``false`` writes nothing.

Not checked (accepted as compatible): ``not``, ``if``/``then``/``else``, ``patternProperties``,
``dependencies``/``dependentSchemas``, ``propertyNames``, ``contains``, min/max properties.
Pure functions; thread-safe.
"""

from __future__ import annotations

from typing import Any

from loglake.schemas.avro_schema import load_json
from loglake.schemas.parse import ParsedSchema

MAX_DEPTH = 64
_ANY_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})


def json_problems(reader: ParsedSchema, writer: ParsedSchema,
                  names: tuple[str, str]) -> list[str]:
    """Problems of a reader with schema ``reader`` reading what ``writer`` wrote; ``names``:
    how the messages call the reader's and the writer's schema (``("new", "old")``)."""
    checker = _Checker(reader, writer, names)
    checker.compare(reader.payload, writer.payload, "#", 0)
    return checker.problems


class _Checker:
    def __init__(self, reader: ParsedSchema, writer: ParsedSchema,
                 names: tuple[str, str]) -> None:
        self.roots = (reader.payload, writer.payload)
        self.refs = (_documents(reader), _documents(writer))
        self.names = names
        self.problems: list[str] = []
        self.seen: set[tuple[int, int]] = set()

    def report(self, error_type: str, path: str, what: str) -> None:
        reader, writer = self.names
        description = what.format(reader=reader, writer=writer, path=path)
        self.problems.append(f"{{errorType:'{error_type}', description:'{description}', "
                             f"additionalInfo:'{path}'}}")

    def resolve(self, schema: Any, side: int) -> tuple[Any, bool]:
        """(the schema a ``$ref`` chain ends at, whether a ``$ref`` was followed)."""
        followed = False
        for _ in range(MAX_DEPTH):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                return schema, followed
            base, _, pointer = schema["$ref"].partition("#")
            document = self.refs[side].get(base) if base else self.roots[side]
            if document is None:
                return True, True  # parse() refuses unresolved refs; be permissive here
            schema, followed = _pointer(document, pointer), True
        return True, True

    def compare(self, r: Any, w: Any, path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            return
        (r, r_ref), (w, w_ref) = self.resolve(r, 0), self.resolve(w, 1)
        if r_ref or w_ref:  # a recursive schema: compare each pair of documents' nodes once
            key = (id(r), id(w))  # nodes of the documents, alive for the whole check
            if key in self.seen:
                return
            self.seen.add(key)
        if r is True or r == {} or w is False:
            return
        if r is False:
            self.report("TYPE_NARROWED", path, "The {reader} schema at path '{path}' accepts "
                        "nothing where the {writer} schema accepts values")
            return
        if w is True:
            w = {}
        if not isinstance(r, dict) or not isinstance(w, dict):
            return
        self._combined(r, w, path, depth)
        self._types(r, w, path)
        self._enum(r, w, path)
        self._bounds(r, w, path)
        self._object(r, w, path, depth)
        self._array(r, w, path, depth)

    def accepts_all(self, schema: Any) -> bool:
        schema, _ = self.resolve(schema, 0)
        return schema is True or schema == {}

    def _types(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        rt, wt = _types(r), _types(w)
        if rt is None:
            return
        if wt is None:
            self.report("TYPE_NARROWED", path, "The {reader} schema at path '{path}' allows "
                        f"only {sorted(rt)} where the {{writer}} schema allows any type")
            return
        missing = {t for t in wt if t not in rt and not (t == "integer" and "number" in rt)}
        if missing:
            narrowed = bool(rt & wt) or ("integer" in rt and "number" in wt)
            kind = "TYPE_NARROWED" if narrowed else "TYPE_CHANGED"
            self.report(kind, path, "The type at path '{path}' in the {reader} schema "
                        f"({'/'.join(sorted(rt))}) does not accept "
                        f"{'/'.join(sorted(missing))} of the {{writer}} schema")

    def _enum(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        if "enum" in r:
            if "enum" not in w and "const" not in w:
                self.report("ENUM_ARRAY_ADDED", path, "The {reader} schema adds an enum at "
                            "path '{path}'")
            elif "enum" in w:
                lost = [v for v in w["enum"] if v not in r["enum"]]
                if lost:
                    self.report("ENUM_ARRAY_NARROWED", path, "The {reader} schema at path "
                                f"'{{path}}' is missing enum values {lost!r} of the "
                                "{writer} schema")
            elif w["const"] not in r["enum"]:
                self.report("ENUM_ARRAY_NARROWED", path, "The {reader} schema enum at path "
                            "'{path}' does not hold the {writer} schema's const")
        if "const" in r:
            if "const" not in w:
                self.report("CONST_ADDED", path, "The {reader} schema adds a const at path "
                            "'{path}'")
            elif w["const"] != r["const"]:
                self.report("CONST_CHANGED", path, "The const at path '{path}' changed")

    def _bounds(self, r: dict[str, Any], w: dict[str, Any], path: str) -> None:
        for key, tighter in (("minLength", _greater), ("maxLength", _less),
                             ("minimum", _greater), ("maximum", _less),
                             ("exclusiveMinimum", _greater), ("exclusiveMaximum", _less),
                             ("minItems", _greater), ("maxItems", _less)):
            if key in r and _number(r[key]) and (
                    key not in w or (_number(w[key]) and tighter(r[key], w[key]))):
                direction = "ADDED" if key not in w else (
                    "INCREASED" if tighter is _greater else "DECREASED")
                self.report(f"{_snake(key)}_{direction}", path, f"The {key} at path "
                            "'{path}' is narrower in the {reader} schema than in the {writer} "
                            "schema")
        for key in ("pattern", "multipleOf", "format"):
            if key in r and r.get(key) != w.get(key):
                self.report(f"{_snake(key)}_{'ADDED' if key not in w else 'CHANGED'}", path,
                            f"The {key} at path '{{path}}' of the {{reader}} schema is not the "
                            "{writer} schema's")
        if r.get("uniqueItems") is True and w.get("uniqueItems") is not True:
            self.report("UNIQUE_ITEMS_ADDED", path, "The {reader} schema requires unique items "
                        "at path '{path}'")

    def _object(self, r: dict[str, Any], w: dict[str, Any], path: str, depth: int) -> None:
        if not ("properties" in r or "properties" in w or "additionalProperties" in r
                or "required" in r):
            return
        r_props: dict[str, Any] = r.get("properties") or {}
        w_props: dict[str, Any] = w.get("properties") or {}
        r_extra = r.get("additionalProperties", True)
        w_extra = w.get("additionalProperties", True)
        for name, schema in r_props.items():
            sub = f"{path}/properties/{name}"
            if name in w_props:
                self.compare(schema, w_props[name], sub, depth + 1)
            elif w_extra is False:
                continue
            elif w_extra is True or w_extra == {}:
                if not self.accepts_all(schema):
                    self.report("PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", sub, "The {writer} "
                                "schema has an open content model and the {reader} schema has "
                                "a property at path '{path}' which is missing in the {writer} "
                                "schema")
            else:
                self.compare(schema, w_extra, sub, depth + 1)
        for name, schema in w_props.items():
            if name in r_props:
                continue
            sub = f"{path}/properties/{name}"
            if r_extra is False:
                self.report("PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", sub, "The {reader} "
                            "schema has a closed content model and is missing the property "
                            "at path '{path}' of the {writer} schema")
            elif not (r_extra is True or r_extra == {}):
                self.compare(r_extra, schema, sub, depth + 1)
        if r_extra is False and w_extra is not False:
            self.report("ADDITIONAL_PROPERTIES_REMOVED", path, "The {reader} schema closes the "
                        "content model at path '{path}' which is open in the {writer} schema")
        elif isinstance(r_extra, dict) and r_extra != {}:
            if w_extra is True or w_extra == {}:
                self.report("ADDITIONAL_PROPERTIES_NARROWED", path, "The {reader} schema "
                            "restricts additional properties at path '{path}'")
            elif isinstance(w_extra, dict):
                self.compare(r_extra, w_extra, f"{path}/additionalProperties", depth + 1)
        added = [n for n in r.get("required") or [] if n not in (w.get("required") or [])]
        for name in added:
            self.report("REQUIRED_ATTRIBUTE_ADDED", f"{path}/properties/{name}", "The {reader} "
                        "schema requires the property at path '{path}' which the {writer} "
                        "schema does not require")

    def _array(self, r: dict[str, Any], w: dict[str, Any], path: str, depth: int) -> None:
        if "items" not in r:
            return
        r_items, w_items = r["items"], w.get("items", True)
        if isinstance(r_items, list) or isinstance(w_items, list):
            r_list = r_items if isinstance(r_items, list) else None
            w_list = w_items if isinstance(w_items, list) else None
            if r_list is None or w_list is None or len(r_list) != len(w_list):
                self.report("ITEMS_CHANGED", f"{path}/items", "The items at path '{path}' "
                            "changed between tuple and list forms or in length")
                return
            for i, (ri, wi) in enumerate(zip(r_list, w_list, strict=True)):
                self.compare(ri, wi, f"{path}/items/{i}", depth + 1)
            return
        self.compare(r_items, w_items, f"{path}/items", depth + 1)

    def _combined(self, r: dict[str, Any], w: dict[str, Any], path: str, depth: int) -> None:
        for key in ("oneOf", "anyOf"):
            r_branches = r.get("oneOf") or r.get("anyOf")
            w_branches = w.get(key)
            if w_branches is None:
                continue
            if r_branches is None:
                for i, branch in enumerate(w_branches):
                    self.compare(_without(r, ("oneOf", "anyOf")) or True, branch,
                                 f"{path}/{key}/{i}", depth + 1)
                return
            for i, branch in enumerate(w_branches):
                if not any(self._quietly_accepts(rb, branch, depth) for rb in r_branches):
                    self.report("COMBINED_TYPE_SUBSCHEMAS_CHANGED", f"{path}/{key}/{i}",
                                "No subschema of the {reader} schema at path '{path}' accepts "
                                "this subschema of the {writer} schema")
            return
        r_branches = r.get("oneOf") or r.get("anyOf")
        if r_branches is not None and not any(
                self._quietly_accepts(rb, _without(w, ()), depth) for rb in r_branches):
            self.report("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path, "No subschema of the "
                        "{reader} schema at path '{path}' accepts the {writer} schema")
        if "allOf" in r:
            w_all = w.get("allOf")
            if not isinstance(w_all, list) or len(w_all) != len(r["allOf"]):
                self.report("COMBINED_TYPE_SUBSCHEMAS_CHANGED", path, "The allOf at path "
                            "'{path}' changed")
            else:
                for i, (rb, wb) in enumerate(zip(r["allOf"], w_all, strict=True)):
                    self.compare(rb, wb, f"{path}/allOf/{i}", depth + 1)

    def _quietly_accepts(self, r: Any, w: Any, depth: int) -> bool:
        before, seen = len(self.problems), set(self.seen)
        self.compare(r, w, "#", depth + 1)
        ok = len(self.problems) == before
        del self.problems[before:]
        self.seen = seen
        return ok


def _documents(parsed: ParsedSchema) -> dict[str, Any]:
    return {name: load_json(reg.schema) for name, reg in parsed.references}


def _pointer(document: Any, pointer: str) -> Any:
    node = document
    for part in [p for p in pointer.split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return True
    return node


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    kinds = set(kind) if isinstance(kind, list) else {kind}
    return kinds if kinds != _ANY_TYPES else None


def _without(schema: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in keys}


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _greater(a: float, b: float) -> bool:
    return a > b


def _less(a: float, b: float) -> bool:
    return a < b


def _snake(key: str) -> str:
    return "".join(f"_{c}" if c.isupper() else c.upper() for c in key)
