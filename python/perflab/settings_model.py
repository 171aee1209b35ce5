"""The base of every settings model in an experiment file: unknown keys are
errors, values are not coerced across types (TOML has types; "8" is not 8),
and a float is finite (TOML's inf and nan, or 1e400, measure nothing).

A model's JSON Schema (`perflab schema`, `perflab keys`) describes each key
with its `Field(description=...)`, else with the comment written above the
field in the model's source (a comment above several fields in a row is
theirs together): the models are the one source of the keys' reference."""

from __future__ import annotations

import functools
import inspect
import io
import tokenize
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema


def _no_nul(value: str) -> str:
    # The operating system cannot take a path or user name with a NUL in it.
    if "\x00" in value:
        raise ValueError(f"got {value!r}; allowed: a path or name without NUL characters")
    return value


# A file system path or an OS user name, as the experiment file gives it.
OsText = Annotated[str, AfterValidator(_no_nul), WithJsonSchema({"type": "string", "pattern": "^[^\\x00]*$"})]


@functools.cache
def _own_comments(cls: type) -> dict[str, str]:
    """The comments above (or beside) each field declared in `cls`'s own body;
    a field right below another shares its comment when the comment names it
    ("Run length, and the warm-up before it": duration and warmup) or the two
    are named alike (io_read_bps, io_write_bps)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments: dict[int, tuple[str, bool]] = {}  # line (1-based) -> (text, the whole line)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                whole = not lines[tok.start[0] - 1][: tok.start[1]].strip()
                comments[tok.start[0]] = (tok.string.lstrip("#").strip(), whole)
    except (tokenize.TokenError, SyntaxError):
        return {}
    indent = None
    out: dict[str, str] = {}
    group: str | None = None  # the comment of the run of fields going on
    owner = ""  # the field it stands above
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped or number == 1:
            group = None if not stripped else group
            continue
        width = len(line) - len(line.lstrip())
        indent = width if indent is None else indent
        if width != indent or (number in comments and comments[number][1]):
            continue
        name, colon, _ = stripped.partition(":")
        if not (colon and name.isidentifier()):
            group = None
            continue
        above: list[str] = []
        n = number - 1
        while n in comments and comments[n][1]:
            above.insert(0, comments[n][0])
            n -= 1
        if above:
            group, owner = " ".join(above), name
        beside = comments.get(number)
        if beside and not beside[1]:
            out[name] = beside[0]
        elif above or (group and (_squashed(name) in _squashed(group) or _kin(name, owner))):
            out[name] = group or ""  # a comment on several fields names each, or they are of a kind
    return out


def _kin(name: str, other: str) -> bool:
    """Fields named alike (io_read_bps, io_write_bps; data_fs, wal_fs)."""
    a, b = name.split("_"), other.split("_")
    return len(a) > 1 and len(b) > 1 and (a[0] == b[0] or a[-1] == b[-1])


def _squashed(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in `cls` or the nearest base that has one."""
    out: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
            out.update({k: v for k, v in _own_comments(klass).items() if k in klass.__annotations__})
    return out


def _describe(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """Each property's description, from its field's comment when the field
    gives none."""
    comments = field_comments(cls)
    props = schema.get("properties", {})
    for name, info in cls.model_fields.items():
        prop = props.get(info.alias or name)
        if prop is None:
            continue
        if "description" not in prop and comments.get(name):
            prop["description"] = comments[name]
        members = [prop, *prop.get("anyOf", ())]
        default = prop.get("default")
        if any(m.get("format") == "duration" for m in members) and isinstance(default, int | float):
            prop["default"] = f"{default:g}s"  # as the file writes it

class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False,
                              json_schema_extra=_describe)
