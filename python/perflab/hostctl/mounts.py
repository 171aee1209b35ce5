"""Which filesystem is mounted where, as /proc/mounts shows it: a mount
point's entry, what is mounted below a path, the device holding a path.
Read only; perflab's own mounts are made and undone in scratchfs (and
netfs, stripe). No perflab imports: the errors a user reads (a full disk,
named by its device) use it from the bottom layer.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path


def _unescape_mount_field(field: str) -> str:
    # /proc/mounts writes space, tab, newline and backslash as octal escapes
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_entry(mountpoint: Path | str) -> dict[str, str] | None:
    """The top mount at `mountpoint` as /proc/mounts shows it (source, type,
    options), or None when nothing is mounted there."""
    target = os.path.abspath(mountpoint)
    found = None
    with contextlib.suppress(OSError), open("/proc/mounts") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 4 and _unescape_mount_field(fields[1]) == target:
                found = {"source": _unescape_mount_field(fields[0]), "type": fields[2], "options": fields[3]}
    return found


def device_of(path: Path | str) -> tuple[str, str]:
    """(the device, the mount point) of the filesystem holding `path` (or its
    nearest existing parent): the mount's source as /proc/mounts names it."""
    point = os.path.realpath(nearest_existing(Path(path)))
    while not os.path.ismount(point) and point != os.path.dirname(point):
        point = os.path.dirname(point)
    entry = mount_entry(point)
    return (entry["source"] if entry else "?"), point


def mounts_under(path: Path | str) -> bool:
    """Is anything mounted at or below `path`? True when /proc/mounts cannot
    be read: a caller about to remove `path` must then leave it."""
    target = os.path.abspath(path)
    try:
        with open("/proc/mounts") as f:
            points = [_unescape_mount_field(fields[1]) for fields in map(str.split, f) if len(fields) >= 2]
    except OSError:
        return True
    return any(p == target or p.startswith(target + "/") for p in points)


def nearest_existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
