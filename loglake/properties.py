"""Java ``.properties`` text, read as ``java.util.Properties.load`` reads it: what Kafka's
clients, tools (``--command-config``, ``--zk-tls-config-file``) and operators' files use.

Format: ``key=value``, ``key: value`` or ``key value`` (the key ends at the first unescaped
``=``, ``:`` or white space; white space around the separator is dropped); ``#``/``!`` comment
lines; a line ending in an odd number of backslashes goes on with the next line, its leading
white space dropped (how KIP-651's multi-line PEM values are written); the escapes ``\\t \\n
\\r \\f \\uXXXX`` and ``\\<char>`` (that character) in keys and values. A later key wins.

Pure and thread-safe (no I/O: callers read the file and report their own errors). A leaf
module: it imports nothing of loglake's.
"""

from __future__ import annotations

import re


def parse_properties(text: str) -> dict[str, str]:
    """The keys and values of a Java ``.properties`` text (see the module: what
    ``java.util.Properties.load`` reads)."""
    result: dict[str, str] = {}
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index].lstrip()
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and index < len(lines):
            line = line[:-1] + lines[index].lstrip()
            index += 1
        if _continues(line):
            line = line[:-1]
        key, value = _split_property(line)
        result[_unescape(key)] = _unescape(value)
    return result


def _continues(line: str) -> bool:
    """Whether ``line`` ends in an odd number of backslashes."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _split_property(line: str) -> tuple[str, str]:
    position = 0
    while position < len(line):
        char = line[position]
        if char == "\\":
            position += 2
            continue
        if char in "=: \t\f":
            break
        position += 1
    key = line[:position]
    rest = line[position:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out: list[str] = []
    position = 0
    while position < len(text):
        char = text[position]
        if char != "\\" or position + 1 >= len(text):
            out.append(char)
            position += 1
            continue
        nxt = text[position + 1]
        if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[position + 2:position + 6]):
            out.append(chr(int(text[position + 2:position + 6], 16)))
            position += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        position += 2
    return "".join(out)
