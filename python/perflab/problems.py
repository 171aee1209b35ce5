"""A settings model's validation errors as the experiment file's problems:
each a dotted path, what was given and what is allowed, in the file's words.

pydantic names its own machinery in an error's location and message: the
members of a union (`str`, `literal['auto']`, a model's class name), the steps
of a validator (`function-after[...]`, `constrained-int`) and Python's types
("a valid dictionary or instance of FsSettings"). None of that is the user's:
a value that matches no member of a union is one problem at its own path,
listing what each member takes ("allowed: one of: a table; false"), and a
table given for a union's model member is judged as that model alone.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, ValidationError

from perflab.tomldoc import fmt_path

# How pydantic tags a union's members and a validator's steps in an error's location.
_TAG = re.compile(r"^(str|int|float|bool|none|bytes|list\[.*\]|dict\[.*\]|set\[.*\]|tuple\[.*\]|literal\[.*\]|"
                  r"constrained-[\w-]+|function-[\w-]+(\[.*\])?|json-or-python\[.*\]|lax-or-strict\[.*\]|"
                  r"is-instance\[.*\]|nullable\[.*\]|chain\[.*\]|tagged-union\[.*\]|model\[.*\])$")
# Python's words for a value's type, and the file's (TOML's).
_WORDS = (("a valid dictionary", "a table"), ("a valid string", "a string"), ("a valid integer", "an integer"),
          ("a valid number", "a number"), ("a valid boolean", "true or false"), ("a valid list", "a list"))


def short(value: object) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def model_in(annotation: Any) -> Any:
    """The first settings model inside a type (`X | None`, `list[X]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = model_in(arg)
        if found is not None:
            return found
    return None


def allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """The keys of the (sub)model at `loc`, as the file writes them (aliases), for 'allowed: ...'."""
    current: object = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        f = next((f for name, f in current.model_fields.items() if (f.alias or name) == str(part)), None)
        if f is None:
            return None
        current = model_in(f.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return None


def _model_names(model: type[BaseModel], seen: set[str] | None = None) -> set[str]:
    """The class names of every model reachable from `model`'s fields (how
    pydantic tags a union's model members)."""
    seen = set() if seen is None else seen
    for f in model.model_fields.values():
        stack: list[Any] = [f.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                if t.__name__ not in seen:
                    seen.add(t.__name__)
                    _model_names(t, seen)
            else:
                stack += list(getattr(t, "__args__", ()) or ())
    return seen


def words(msg: str) -> str:
    """pydantic's message in the file's words: "a table", "an integer", "auto" in TOML's quotes."""
    msg = msg.removeprefix("Value error, ").removeprefix("Input should be ")
    msg = re.sub(r"a valid dictionary or instance of \w+", "a table", msg)
    for python, toml in _WORDS:
        msg = msg.replace(python, toml)
    msg = {"False": "false", "True": "true"}.get(msg, msg)
    return re.sub(r"'([^']*)'", r'"\1"', msg) if msg.startswith("'") else msg


def clean_errors(errors: list[Any], names: set[str]) -> list[Any]:
    """Errors at the file's paths: union tags and validator steps out of
    their locations; a union member's complaint at the value itself dropped
    where another member judged inside it (the value was that member's
    table); the rest at one path merged into one problem."""
    out = []
    for err in errors:
        clean: list[Any] = []
        member_of: tuple[Any, ...] | None = None
        for part in err["loc"]:
            if isinstance(part, str) and (_TAG.match(part) or part in names):
                member_of = tuple(clean) if member_of is None else member_of
                continue
            clean.append(part)
        out.append({**err, "loc": tuple(clean), "member_of": member_of})
    deeper = {e["member_of"] for e in out if e["member_of"] is not None and len(e["loc"]) > len(e["member_of"])}
    out = [e for e in out if not (e["loc"] == e["member_of"] and e["member_of"] in deeper)]
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for e in out:
        groups.setdefault(e["loc"], []).append(e)
    merged = []
    for loc, members in groups.items():
        union = [m for m in members if m["member_of"] == loc]
        if len(union) > 1:
            allowed = dict.fromkeys(words(m["msg"]) for m in union)
            merged.append({"loc": loc, "type": "union", "input": union[0].get("input"),
                           "msg": "allowed: one of: " + "; ".join(allowed)})
            merged += [m for m in members if m["member_of"] != loc]
        else:
            merged += members
    return merged


def pydantic_problems(exc: ValidationError, prefix: tuple[Any, ...], model: type[BaseModel]) -> list[tuple[str, str]]:
    """(dotted path, text) for each of a model's validation errors."""
    problems = []
    for err in clean_errors(exc.errors(), _model_names(model) | {model.__name__}):
        loc = err["loc"]
        path = fmt_path(prefix + loc)
        kind = err["type"]
        given = err.get("input")
        if kind == "extra_forbidden":
            allowed = allowed_keys(model, loc[:-1])
            text = "unknown key"
            if allowed is not None:
                text += f"; allowed: {', '.join(allowed)}"
        elif kind == "missing":
            text = "missing; this key is required"
        elif kind == "literal_error":
            text = f"got {short(given)}; allowed: {err.get('ctx', {}).get('expected', '')}"
        elif kind == "value_error":
            msg = err["msg"].removeprefix("Value error, ")
            text = msg if msg.startswith(("got", "'", '"')) else f"got {short(given)}; {msg}"
        elif kind == "union":
            text = f"got {short(given)}; {err['msg']}"
        else:
            text = f"got {short(given)}; allowed: {words(err['msg'])}"
        problems.append((path, text))
    return problems
