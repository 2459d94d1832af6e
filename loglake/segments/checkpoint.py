"""Durable small-file writes and the single-offset checkpoint files of a partition.

The single-offset checkpoints are the recovery point, the log start offset (segments/log.py)
and the high watermark (:func:`write_high_watermark`, broker/partition.py); their names are in
filenames.py.

On-disk format of an offset checkpoint (Kafka's checkpoint shape with one entry)::

    0           version
    1           number of entries
    <offset>    decimal

Durable write protocol (:func:`write_durably`), each step crash-safe:

1. write the new content to ``<name>.tmp`` and fsync it;
2. rename ``<name>.tmp`` over ``<name>`` (atomic on POSIX);
3. fsync the directory so the rename itself survives a power loss.

A crash before step 2 leaves the old file plus a ``.tmp`` that the next open deletes; after
step 2 the new content is complete. Readers therefore see the old or the new file, never a mix;
a file that still fails to parse (disk corruption, manual edits) reads as "no checkpoint", and the
caller falls back to the conservative choice (full recovery).

Not thread-safe per file: one writer per path at a time (the partition's event-loop thread).
"""

from __future__ import annotations

import os
from pathlib import Path

from loglake.segments import filenames

CHECKPOINT_VERSION = 0


def fsync_directory(directory: Path) -> None:
    """fsync a directory so that creations, renames and unlinks in it are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync directory."""
    temp = filenames.temp_file(path)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_directory(path.parent)


def remove_durably(path: Path) -> None:
    """Unlink ``path`` if present and make the unlink durable."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_directory(path.parent)


def format_entries(lines: list[str]) -> bytes:
    """Kafka checkpoint text: version line, count line, one line per entry."""
    return ("\n".join([str(CHECKPOINT_VERSION), str(len(lines)), *lines]) + "\n").encode()


def parse_entries(path: Path) -> list[str] | None:
    """The entry lines of a checkpoint file; None if missing or malformed."""
    try:
        text = path.read_bytes().decode("ascii")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    lines = text.split("\n")
    if not text.endswith("\n") or len(lines) < 3:
        return None
    lines.pop()  # the empty string after the final newline
    if lines[0] != str(CHECKPOINT_VERSION) or not lines[1].isdigit():
        return None
    entries = lines[2:]
    if int(lines[1]) != len(entries):
        return None
    return entries


def write_offset(path: Path, offset: int) -> None:
    """Durably write a single-offset checkpoint."""
    write_durably(path, format_entries([str(offset)]))


def read_offset(path: Path) -> int | None:
    """The offset stored in a single-offset checkpoint; None if missing or corrupt."""
    entries = parse_entries(path)
    if entries is None or len(entries) != 1:
        return None
    text = entries[0]
    if not text.isdigit():
        return None
    return int(text)


def read_high_watermark(directory: Path) -> int:
    """The high watermark checkpointed in a partition directory; 0 if missing or corrupt (the
    caller caps it by the log end offset)."""
    offset = read_offset(directory / filenames.HIGH_WATERMARK_CHECKPOINT)
    return 0 if offset is None else offset


def write_high_watermark(directory: Path, offset: int) -> None:
    """Durably checkpoint a partition's high watermark."""
    write_offset(directory / filenames.HIGH_WATERMARK_CHECKPOINT, offset)
