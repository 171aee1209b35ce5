"""target.settings as this mariadbd would take them, checked against its
own `--verbose --help` (no server started)."""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from perflab.errors import UserError
from perflab.targets.mariadb.binaries import find_binaries, server_version
from perflab.targets.mariadb.settings import MariadbSettings, SettingValue, option_key

SIZE_SUFFIX = re.compile(r"^\s*\d+(\.\d+)?\s*[kmgtpe]?\s*$", re.IGNORECASE)
BOOLEAN_WORDS = ("on", "off", "true", "false", "1", "0", "yes", "no")


@dataclass(frozen=True)
class ServerOption:
    name: str  # as --help prints it, with hyphens
    kind: str  # "number", "text", "boolean"
    choices: tuple[str, ...] = ()


@functools.lru_cache(maxsize=8)
def _server_options(server: str, mtime_ns: int) -> dict[str, ServerOption]:
    proc = subprocess.run([server, "--no-defaults", "--verbose", "--help"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "LC_ALL": "C"})
    options: dict[str, ServerOption] = {}
    text = proc.stdout.split("\nVariables (--variable-name=value)")[0]
    entries = re.split(r"\n(?=  (?:-\w, )?--[a-z])", text)
    for entry in entries:
        m = re.match(r"\s*(?:-\w, )?--([a-z0-9][a-z0-9_-]*)(\[?=(#|name)\]?)?", entry)
        if not m:
            continue
        name = option_key(m.group(1))
        kind = {"#": "number", "name": "text"}.get(m.group(3) or "", "boolean")
        choices: tuple[str, ...] = ()
        one_of = re.search(r"One of: ([^\n]+(?:\n\s+[^\n-][^\n]*)*)", entry)
        if kind == "text" and one_of:
            words = " ".join(one_of.group(1).split())
            if "," in words and "(" not in words:
                choices = tuple(w.strip().rstrip(".") for w in words.split(","))
        options[name] = ServerOption(name, kind, choices)
    return options


def server_options(server: Path) -> dict[str, ServerOption]:
    """The options this mariadbd takes, with their kind, from `mariadbd
    --no-defaults --verbose --help` (no data directory, no server started)."""
    return _server_options(str(server), server.stat().st_mtime_ns)


def _value_problem(option: ServerOption, value: SettingValue) -> str | None:
    if option.kind == "boolean":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return None
        return None if str(value).strip().lower() in BOOLEAN_WORDS else "a boolean: ON, OFF, 1 or 0"
    if option.kind == "number":
        if isinstance(value, bool):
            return "a number"
        if isinstance(value, (int, float)) or SIZE_SUFFIX.match(str(value)):
            return None
        return "a number, with K, M, G or T for a size (e.g. \"1G\")"
    if option.choices and not isinstance(value, bool):
        words = [w.lower() for w in option.choices]
        parts = [p.strip().lower() for p in str(value).split(",")]
        if str(value).isdigit() or all(p in words for p in parts):
            return None
        return "one of " + ", ".join(option.choices)
    return None


def setting_problems(settings: MariadbSettings) -> list[tuple[str, str]]:
    """Names and values of target.settings this mariadbd would refuse at start,
    checked against its own --help: a typo is found by `check`, with the
    closest name the server knows."""
    if not settings.settings:
        return []
    try:
        server, _ = find_binaries(settings.bin_dir)
        known = server_options(server)
    except (UserError, OSError, subprocess.SubprocessError):
        return []  # the preflight says what is wrong with the binaries
    if not known:
        return []
    version = server_version(server) or "?"
    problems = []
    for name, value in settings.settings.items():
        path = f"target.settings.{name}"
        norm = option_key(name)
        if norm.startswith("loose-"):
            continue  # the server itself ignores an unknown loose- option
        option = known.get(norm)
        if option is None and norm.startswith("skip-"):
            option = known.get(norm[5:])
        if option is None:
            close = difflib.get_close_matches(norm, list(known), n=1)
            hint = f"did you mean {close[0].replace('-', '_')}?" if close else "see `mariadbd --verbose --help`"
            problems.append((path, f"got {name!r}: MariaDB {version} has no such option; {hint}"))
            continue
        problem = _value_problem(option, value)
        if problem:
            problems.append((path, f"got {json.dumps(value)}; allowed: {problem} (MariaDB {version})"))
    return problems

