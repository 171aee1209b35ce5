"""The experiment file's keys, from the settings models alone.

`perflab keys [SECTION]` lists them (type, default, unit, allowed values and
a line of description), `perflab schema` writes the JSON Schema of the whole
file (editors with a TOML language server validate and complete a file that
starts with `#:schema PATH`), and docs/keys.md is the same list as a page.
All three come from the models' JSON Schemas: a key's description is its
`Field(description=...)`, else the comment above the field in the model
(perflab.settings_model), so a key added to a model is listed, checked by
editors and documented without a second place to write it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from perflab.collectors import COLLECTORS
from perflab.errors import UserError
from perflab.hostctl.knobs import HostSettings
from perflab.registry import Registry
from perflab.search import SearchSettings
from perflab.spec import FACTOR_ROOTS, DriverSettings, ExperimentSection
from perflab.targets import TARGETS
from perflab.workloads import WORKLOADS

# What each section of the file is, for the schema's and the page's headings.
SECTION_TEXT = {
    "experiment": "the experiment's name, repetitions, run order and seed",
    "target": "the system under test; its keys depend on its kind",
    "workload": "what drives the target; its keys depend on its kind",
    "factors": "parameters varied across runs: a dotted path = a list of levels "
               '("workload.clients" = [1, 8, 32]); the plan is their product',
    "collect": "samplers of telemetry during a run: NAME = { interval = \"1s\", ... }, true or false "
               "(omit the table for the defaults)",
    "host": "machine settings applied before a run and always restored",
    "driver": "where perflab's own threads run",
    "search": "a capacity search: the highest rate that meets a goal",
}
SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
# The longest one-line description `perflab keys` prints.
LINE = 120


@dataclass(frozen=True)
class Key:
    path: str
    type: str
    default: str
    unit: str
    allowed: str
    description: str


@dataclass(frozen=True)
class Section:
    name: str  # "workload.http", "collect.vmstat", "search"
    prefix: str  # where its keys stand in the file: "workload", "collect.vmstat", "search"
    model: type[BaseModel]
    text: str


def _kinded(root: str, registry: Registry) -> list[Section]:
    return [Section(f"{root}.{e.name}", root, registry.get(e.name).Settings, e.description)
            for e in registry.entries()]


def sections() -> list[Section]:
    """Every section of the file with a settings model, kinds and collectors one by one."""
    return [Section("experiment", "experiment", ExperimentSection, SECTION_TEXT["experiment"]),
            *_kinded("target", TARGETS), *_kinded("workload", WORKLOADS),
            *[Section(f"collect.{e.name}", f"collect.{e.name}", COLLECTORS.get(e.name).Settings, e.description)
              for e in COLLECTORS.entries()],
            Section("host", "host", HostSettings, SECTION_TEXT["host"]),
            Section("driver", "driver", DriverSettings, SECTION_TEXT["driver"]),
            Section("search", "search", SearchSettings, SECTION_TEXT["search"])]


def find(name: str | None) -> list[Section]:
    """The sections `perflab keys NAME` means: "workload.http", "[search]",
    "target" (every kind), "collect", "http" (a kind of either), or all."""
    if name is None:
        return sections()
    wanted = name.strip().strip("[]").strip()
    names = _names()
    if wanted in names:
        return [_section(wanted)]
    found = [n for n in names if n.startswith(wanted + ".") or n.split(".", 1)[-1] == wanted]
    if not found:
        raise UserError(f"keys: no section or kind {name!r}",
                        f"give one of: {', '.join(_roots())}, or a kind: {', '.join(n for n in names if '.' in n)}")
    return [_section(n) for n in found]


def _roots() -> list[str]:
    return ["experiment", "target", "workload", "collect", "host", "driver", "search"]


def _names() -> list[str]:
    """Every section's name, without importing a kind's module."""
    return ["experiment", *(f"target.{n}" for n in TARGETS.names()), *(f"workload.{n}" for n in WORKLOADS.names()),
            *(f"collect.{n}" for n in COLLECTORS.names()), "host", "driver", "search"]


def _section(name: str) -> Section:
    root, _, kind = name.partition(".")
    if kind:
        registry = {"target": TARGETS, "workload": WORKLOADS, "collect": COLLECTORS}[root]
        entry = next(e for e in registry.entries() if e.name == kind)
        return Section(name, root if root != "collect" else name, registry.get(kind).Settings, entry.description)
    return next(s for s in sections() if s.name == name)


# ------------------------------------------------------------------ the keys


def keys(section: Section) -> list[Key]:
    """Every key of a section as the file writes it, nested tables' keys
    after their table's ("driver.network.delay"; a list of tables:
    "workload.request_mix[].path")."""
    schema = section.model.model_json_schema(mode="validation")
    return _walk(schema, schema.get("$defs", {}), section.prefix)


def _deref(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _options(schema: dict[str, Any], defs: dict[str, Any]) -> list[dict[str, Any]]:
    """The members of a union, less null (TOML has none: a key left out is)."""
    schema = _deref(schema, defs)
    if "anyOf" in schema and "format" not in schema:
        return [o for m in schema["anyOf"] for o in _options(m, defs) if o.get("type") != "null"]
    return [schema]


def _walk(schema: dict[str, Any], defs: dict[str, Any], prefix: str) -> list[Key]:
    out = []
    required = set(schema.get("required", ()))
    for name, prop in schema.get("properties", {}).items():
        path = f"{prefix}.{name}"
        options = _options(prop, defs)
        out.append(Key(path, " or ".join(dict.fromkeys(_type(o, defs) for o in options)),
                       "required" if name in required else _default(prop, options),
                       "; ".join(dict.fromkeys(u for o in options if (u := _unit(o)))),
                       "; ".join(dict.fromkeys(a for o in options if (a := _allowed(o)))),
                       _description(prop, defs, name)))
        out += _below(options, defs, path)
    return out


def _below(options: list[dict[str, Any]], defs: dict[str, Any], path: str) -> list[Key]:
    """The keys inside a value: a table's, a list of tables' ("PATH[].key"),
    a table of named tables' ("PATH.NAME.key")."""
    out = []
    for option in options:
        if "properties" in option:
            out += _walk(option, defs, path)
        elif option.get("type") == "array" and isinstance(option.get("items"), dict):
            out += _below(_options(option["items"], defs), defs, path + "[]")
        elif option.get("type") == "object" and isinstance(option.get("additionalProperties"), dict):
            out += _below(_options(option["additionalProperties"], defs), defs, path + ".NAME")
    return out


_TYPE_WORDS = {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean",
               "object": "table", "array": "list"}


def _type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    if schema.get("format") in ("duration", "size"):
        return str(schema["format"])
    if "const" in schema or "enum" in schema:
        values = schema.get("enum", [schema.get("const")])
        if all(isinstance(v, bool) for v in values):
            return "boolean"
        return "string" if all(isinstance(v, str) for v in values) else "value"
    kind = schema.get("type")
    if kind == "array":
        items = _options(schema.get("items", {}), defs)
        inner = " or ".join(dict.fromkeys(_type(o, defs) for o in items)) if items and items[0] else "values"
        return f"list of {inner}{'s' if inner in ('table', 'string', 'integer', 'number') else ''}"
    if kind == "object" and "properties" not in schema:
        values = schema.get("additionalProperties")
        if isinstance(values, dict) and values:
            inner = " or ".join(dict.fromkeys(_type(o, defs) for o in _options(values, defs)))
            return f"table of NAME = {inner}"
        return "table"
    if isinstance(kind, list):
        return " or ".join(_TYPE_WORDS.get(str(k), str(k)) for k in kind if k != "null")
    if "anyOf" in schema:
        return " or ".join(dict.fromkeys(_type(o, defs) for o in _options(schema, defs)))
    return _TYPE_WORDS.get(str(kind), "value")


def _unit(schema: dict[str, Any]) -> str:
    if schema.get("format") == "duration":
        return "us ms s m h d: \"60s\""
    if schema.get("format") == "size":
        return "B kB MB GB TB: \"512MB\""
    return str(schema.get("unit", ""))


def _value(value: object) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, bool) else str(value).lower()


def _allowed(schema: dict[str, Any]) -> str:
    if "enum" in schema or "const" in schema:
        return ", ".join(_value(v) for v in schema.get("enum", [schema.get("const")]))
    parts = []
    for word, key in (("≥", "minimum"), (">", "exclusiveMinimum"), ("≤", "maximum"), ("<", "exclusiveMaximum")):
        if key in schema:
            parts.append(f"{word} {_number(schema[key])}")
    if schema.get("minLength") == 1 and "maxLength" not in schema:
        parts.append("not empty")
    elif "maxLength" in schema:
        parts.append(f"{schema.get('minLength', 0)} to {schema['maxLength']} characters")
    if "minItems" in schema or "maxItems" in schema:
        parts.append(f"{schema.get('minItems', 0)} to {schema.get('maxItems', 'any number of')} entries")
    if "pattern" in schema and schema.get("format") not in ("duration", "size") and "x00" not in schema["pattern"]:
        parts.append(f"matching {schema['pattern']}")
    return ", ".join(parts)


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def _default(prop: dict[str, Any], options: list[dict[str, Any]]) -> str:
    if "default" not in prop:
        return ""
    value = prop["default"]
    if value is None:
        return "none"
    return _value(value)


def _description(prop: dict[str, Any], defs: dict[str, Any], name: str = "") -> str:
    text = prop.get("description") or _deref(prop, defs).get("description") or ""
    if not text and name == "kind":
        text = "Which kind this section is (`perflab list` shows them; `perflab keys KIND` its keys)."
    return " ".join(str(text).split())


def first_sentence(text: str) -> str:
    """One line of a description: its first sentence (up to a stop or a
    semicolon outside brackets, followed by a space)."""
    for stops in (".;", ":"):  # a long sentence: up to its colon
        depth = 0
        for i, c in enumerate(text[:-1]):
            depth += (c in "([{") - (c in ")]}")
            if depth <= 0 and c in stops and text[i + 1] == " " and i > 0 and text[i - 1] not in " .":
                text = text[: i + (c == ".")]
                break
        if len(text) <= LINE:
            return text
    return text[: LINE - 1].rsplit(" ", 1)[0] + " …"


# ------------------------------------------------------------------ output


def text(name: str | None) -> str:
    """`perflab keys [NAME]`: each section's keys as a table."""
    blocks = []
    for section in find(name):
        rows = [[k.path, k.type, k.default, k.unit, k.allowed, first_sentence(k.description)] for k in keys(section)]
        header = ["key", "type", "default", "unit", "allowed", "description"]
        widths = [min(max([len(h)] + [len(r[i]) for r in rows]), 40) for i, h in enumerate(header)]

        def line(cells: list[str], widths: list[int] = widths) -> str:
            return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

        kind = section.name.partition(".")[2]
        title = f"[{section.prefix}]" + (f" kind = {json.dumps(kind)}" if kind and section.prefix != section.name else "")
        blocks.append("\n".join([f"{title}: {section.text}", line(header), line(["-" * w for w in widths]),
                                 *map(line, rows)]))
    return "\n\n".join(blocks)


def _md(cell: str) -> str:
    return cell.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    """docs/keys.md: every section's keys with their whole descriptions."""
    out = ["# The experiment file's keys", "",
           "Generated from perflab's settings models by `perflab keys --markdown` (a test holds it current); "
           "`perflab keys SECTION` prints one section, `perflab schema` the JSON Schema editors use. "
           "Durations carry their unit (`\"60s\"`, `\"250ms\"`); sizes are bytes or carry a unit (`\"512MB\"`). "
           "A key of `[target]`, `[workload]`, `[collect]`, `[host]` or `[driver]` may also be a factor "
           "(`[factors] \"workload.clients\" = [1, 8, 32]`).", ""]
    for root in _roots():
        out += [f"## [{root}]", "", SECTION_TEXT[root][0].upper() + SECTION_TEXT[root][1:] + ".", ""]
        for section in [s for s in sections() if s.name == root or s.name.startswith(root + ".")]:
            if section.name != root:
                out += [f"### {section.name}", "", section.text[0].upper() + section.text[1:] + ".", ""]
            out += ["| key | type | default | unit | allowed | description |", "| --- | --- | --- | --- | --- | --- |"]
            out += [f"| `{k.path}` | {_md(k.type)} | {_md(k.default)} | {_md(k.unit)} | {_md(k.allowed)} | "
                    f"{_md(k.description)} |" for k in keys(section)]
            out.append("")
        if root == "workload":
            out += ["## [factors]", "", SECTION_TEXT["factors"][0].upper() + SECTION_TEXT["factors"][1:] + ".", ""]
    return "\n".join(out)


# ------------------------------------------------------------------ the schema


def _strip_required(schema: object) -> None:
    """A factor may give any key of a section the file leaves out: the
    schema of the file alone cannot require it."""
    if isinstance(schema, dict):
        schema.pop("required", None)
        for value in schema.values():
            _strip_required(value)
    elif isinstance(schema, list):
        for value in schema:
            _strip_required(value)


def file_schema() -> dict[str, Any]:
    """The JSON Schema of an experiment file (draft 7), from the models."""
    every = sections()
    models = list(dict.fromkeys(s.model for s in every))
    refs, top = models_json_schema([(m, "validation") for m in models], ref_template="#/$defs/{model}",
                                   title="perflab experiment file")
    defs: dict[str, Any] = top.get("$defs", {})
    ref = {m: refs[(m, "validation")]["$ref"] for m in models}
    kept = {ref[ExperimentSection].rsplit("/", 1)[-1], ref[SearchSettings].rsplit("/", 1)[-1]}
    for name, schema in defs.items():
        if name not in kept:
            _strip_required(schema)

    def kinded(root: str) -> dict[str, Any]:
        kinds: dict[str, list[str]] = {}
        for s in every:
            if s.prefix == root:
                kinds.setdefault(ref[s.model], []).append(s.name.partition(".")[2])
        variants: list[dict[str, Any]] = []
        for target, names in kinds.items():
            definition = defs[target.rsplit("/", 1)[-1]]
            definition.setdefault("properties", {})["kind"] = {"enum": names} if len(names) > 1 else {"const": names[0]}
            definition["required"] = ["kind"]
            variants.append({"$ref": target})
        # no kind: a factor on the whole section gives each level's (perflab check says so otherwise)
        variants.append({"type": "object", "not": {"required": ["kind"]}})
        return {"description": SECTION_TEXT[root], "type": "object", "anyOf": variants}

    collect = {s.name.partition(".")[2]: {"description": s.text, "anyOf": [{"type": "boolean"}, {"$ref": ref[s.model]}]}
               for s in every if s.prefix.startswith("collect.")}
    return {
        "$schema": SCHEMA_DRAFT,
        "title": "perflab experiment file",
        "description": "An experiment: target, workload, factors, collectors. `perflab keys` lists every key.",
        "type": "object",
        "additionalProperties": False,
        "required": ["experiment", "workload"],
        "properties": {
            "experiment": {"$ref": ref[ExperimentSection], "description": SECTION_TEXT["experiment"]},
            "target": kinded("target"),
            "workload": kinded("workload"),
            "factors": {"description": SECTION_TEXT["factors"], "type": "object",
                        "propertyNames": {"pattern": rf"^({'|'.join(FACTOR_ROOTS)})(\..+)?$"},
                        "additionalProperties": {"type": "array", "minItems": 1, "uniqueItems": True}},
            "collect": {"description": SECTION_TEXT["collect"], "type": "object", "additionalProperties": False,
                        "properties": collect},
            "host": {"$ref": ref[HostSettings], "description": SECTION_TEXT["host"]},
            "driver": {"$ref": ref[DriverSettings], "description": SECTION_TEXT["driver"]},
            "search": {"$ref": ref[SearchSettings], "description": SECTION_TEXT["search"]},
        },
        "$defs": defs,
    }


def schema_text() -> str:
    """The schema as `perflab schema` writes it (and docs/perflab.schema.json holds it)."""
    return json.dumps(file_schema(), indent=1, ensure_ascii=False) + "\n"
