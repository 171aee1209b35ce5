"""Reading an experiment file's TOML, with every error named by its dotted path.

`tomllib` reports a duplicate key as "Cannot overwrite a value (at line 4,
column 14)" and does not check TOML 1.0's 64-bit integer range; it raises a
plain ValueError for an integer of more than 4300 digits and a RecursionError
for deep nesting. `parse` turns each of these into a (dotted path, text)
problem, as every other error in an experiment file is reported.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# TOML 1.0: "Arbitrary 64-bit signed integers (from -2^63 to 2^63-1) should be
# accepted and handled losslessly. If an integer cannot be represented
# losslessly, an error must be thrown."
INT_MIN = -(2**63)
INT_MAX = 2**63 - 1
# No experiment file needs more than a handful of levels (collect.vmstat.interval,
# factors."workload.clients"[0]); a bound keeps deep documents from reaching
# Python's recursion limit anywhere downstream.
MAX_DEPTH = 16

_BARE = r"[A-Za-z0-9_-]+"
_BASIC = r'"(?:[^"\\\n]|\\.)*"'
_LITERAL = r"'[^'\n]*'"
_SIMPLE = f"(?:{_BARE}|{_BASIC}|{_LITERAL})"
_KEY = rf"{_SIMPLE}(?:[ \t]*\.[ \t]*{_SIMPLE})*"
_KEY_VALUE = re.compile(rf"^[ \t]*({_KEY})[ \t]*=")
_HEADER = re.compile(rf"^[ \t]*(\[\[?)[ \t]*({_KEY})[ \t]*\]\]?[ \t]*(?:#.*)?$")
_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_DIGITS = re.compile(r"\d(?:_?\d){4300,}")


class TomlProblem(Exception):
    """The file is not TOML perflab can read: `path` (dotted, may be "") and `text`."""

    def __init__(self, path: str, text: str) -> None:
        super().__init__(f"{path}: {text}" if path else text)
        self.path = path
        self.text = text


def _key_parts(key: str) -> list[str]:
    """The parts of a TOML key as written (bare, "basic" or 'literal', dotted);
    a key TOML refuses (a bad escape) is named as written."""
    try:
        doc: object = tomllib.loads(f"{key} = 0")
    except tomllib.TOMLDecodeError:
        return [key.strip("\"'")]
    parts = []
    while isinstance(doc, dict) and len(doc) == 1:
        (name, doc), = doc.items()
        parts.append(name)
    return parts


def _table_at(lines: list[str], index: int) -> list[str]:
    """The table header in effect at line `index` (0-based): its key parts."""
    for line in reversed(lines[:index]):
        m = _HEADER.match(line)
        if m:
            return _key_parts(m.group(2))
    return []


def key_at_line(lines: list[str], lineno: int) -> list[str] | None:
    """The full key of the key/value statement ending at line `lineno` (1-based):
    a multi-line array's key is on an earlier line."""
    for index in range(min(lineno, len(lines)) - 1, -1, -1):
        line = lines[index]
        m = _KEY_VALUE.match(line)
        if m:
            return _table_at(lines, index) + _key_parts(m.group(1))
        h = _HEADER.match(line)
        if h:
            return _key_parts(h.group(2))
    return None


def fmt_path(loc: tuple[Any, ...] | list[Any]) -> str:
    """A location as a dotted path: experiment.name, factors."workload.clients"[1]."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            s = str(part)
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", s):
                s = json.dumps(s)
            out += ("." if out else "") + s
    return out





def _decode_problem(exc: tomllib.TOMLDecodeError, lines: list[str]) -> TomlProblem:
    message = str(exc)
    m = _POSITION.search(message)
    lineno = int(m.group(1)) if m else 0
    where = f"line {lineno}" if lineno else "the file"
    declared = re.match(r"Cannot (?:declare|redefine namespace|mutate immutable namespace) (\(.*?\))"
                        r"(?: twice)?(?: \(at line \d+, column \d+\))?$", message, re.DOTALL)
    if declared:
        try:
            table = ast.literal_eval(declared.group(1))
        except (ValueError, SyntaxError):
            table = None
        if isinstance(table, tuple):
            return TomlProblem(fmt_path(table), f"given twice (again at {where}); allowed: each table once")
    inline = re.match(r"Duplicate inline table key '(.*)'", message)
    if message.startswith("Cannot overwrite a value") or inline:
        parts = key_at_line(lines, lineno)
        if parts is not None:
            if inline:
                parts.append(inline.group(1))
            return TomlProblem(fmt_path(parts), f"given twice (again at {where}); allowed: each key once")
    parts = key_at_line(lines, lineno) if lineno else None
    return TomlProblem(fmt_path(parts) if parts else "", f"not valid TOML: {message}")


def _check_values(doc: dict[str, object]) -> list[tuple[str, str]]:
    """Integers outside 64 bits and nesting deeper than MAX_DEPTH, by dotted path."""
    problems: list[tuple[str, str]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), doc)]
    while stack:
        loc, value = stack.pop()
        if len(loc) > MAX_DEPTH:
            key = loc[: max(i for i, part in enumerate(loc) if isinstance(part, str)) + 1]
            problems.append((fmt_path(key), f"nested more than {MAX_DEPTH} levels deep; "
                             f"allowed: at most {MAX_DEPTH} levels of tables and arrays"))
            continue
        if isinstance(value, dict):
            stack += [((*loc, k), v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            stack += [((*loc, i), v) for i, v in reversed(list(enumerate(value)))]
        elif isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
            given = str(value) if value.bit_length() <= 256 else f"an integer of {value.bit_length()} bits"
            problems.append((fmt_path(loc), f"got {given}; allowed: an integer from -2^63 to 2^63-1 "
                             "(TOML integers are 64-bit)"))
    return problems


def parse(text: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The document and the problems with its values; raises TomlProblem when
    it cannot be read at all."""
    lines = text.splitlines()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _decode_problem(exc, lines) from None
    except ValueError:  # an integer of more than 4300 digits (CPython's int limit)
        m = _DIGITS.search(text)
        lineno = text.count("\n", 0, m.start()) + 1 if m else 0
        parts = key_at_line(lines, lineno) if lineno else None
        raise TomlProblem(fmt_path(parts) if parts else "",
                          f"got an integer of more than 4300 digits (at line {lineno}); allowed: an integer "
                          "from -2^63 to 2^63-1 (TOML integers are 64-bit)") from None
    except RecursionError:
        deepest = max(range(len(lines)), key=lambda i: lines[i].count("[") + lines[i].count("{"), default=0)
        parts = key_at_line(lines, deepest + 1)
        raise TomlProblem(fmt_path(parts) if parts else "",
                          f"nested too deeply to read (at line {deepest + 1}); allowed: at most {MAX_DEPTH} "
                          "levels of tables and arrays") from None
    return doc, _check_values(doc)
