"""The experiment file: parsing, validation, and resolution per run.

An experiment file is TOML with the sections [experiment], [target],
[workload], [factors] and [collect] (see DESIGN.md). The target and workload
sections are validated by the settings model of their `kind`, looked up in the
registries; each factor path is substituted into the file and the result
validated again, so a factor that names nothing, or a value of the wrong type,
is an error before anything runs. Every problem is reported as a dotted path,
what was given, and what is allowed.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator

from perflab.collectors import COLLECTORS
from perflab.endpoints import Capability, describe
from perflab.errors import SpecError, UserError
from perflab.settings_model import StrictModel
from perflab.targets import TARGETS
from perflab.workloads import WORKLOADS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FACTOR_ROOTS = ("target", "workload", "collect")


NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class ExperimentSection(StrictModel):
    name: str
    description: str = ""
    repetitions: int = Field(default=1, ge=1)
    order: Literal["sequential", "random"] = "sequential"
    seed: int | None = None
    # factor path -> the level the report compares the others with (default: the first)
    baseline: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name_is_a_file_name(cls, value: str) -> str:
        # It names the output directory (results/NAME-TIMESTAMP).
        if not NAME_PATTERN.match(value):
            raise ValueError(
                f"got {value!r}; allowed: up to 100 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit (it names the output directory)"
            )
        return value


class FileModel(StrictModel):
    experiment: ExperimentSection
    target: dict[str, Any]
    workload: dict[str, Any]
    factors: dict[str, Any] = Field(default_factory=dict)
    collect: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunSpec:
    """One run's fully resolved settings."""

    target: Any
    workload: Any
    collect: dict[str, Any]
    raw: dict[str, Any]


@dataclass
class Experiment:
    path: Path | None
    text: str
    raw: dict[str, Any]
    meta: ExperimentSection
    factors: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.meta.name

    def resolve(self, combo: dict[str, Any]) -> RunSpec:
        """The settings of the run at one factor combination (already validated)."""
        spec, problems = _resolve(self.raw, combo)
        if problems or spec is None:  # validated at load; reaching here is a bug
            raise SpecError(problems or [("", "cannot resolve")])
        return spec

    def combinations(self) -> list[dict[str, Any]]:
        keys = list(self.factors)
        return [dict(zip(keys, values, strict=True)) for values in itertools.product(*self.factors.values())]


# ---------------------------------------------------------------- formatting


def fmt_path(loc: tuple[Any, ...] | list[Any]) -> str:
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


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Field names of the (sub)model at `loc`, for 'allowed: ...'."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        f = current.model_fields.get(str(part))
        if f is None:
            return None
        current = _model_in(f.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def pydantic_problems(
    exc: ValidationError, prefix: tuple[Any, ...], model: type[BaseModel]
) -> list[tuple[str, str]]:
    problems = []
    for err in exc.errors():
        loc = tuple(x for x in err["loc"] if not (isinstance(x, str) and x.startswith("function-")))
        path = fmt_path(prefix + loc)
        kind = err["type"]
        given = err.get("input")
        if kind == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            text = "unknown key"
            if allowed is not None:
                text += f"; allowed: {', '.join(allowed)}"
        elif kind == "missing":
            text = "missing; this key is required"
        elif kind == "literal_error":
            text = f"got {_short(given)}; allowed: {err.get('ctx', {}).get('expected', '')}"
        elif kind == "value_error":
            msg = err["msg"].removeprefix("Value error, ")
            text = msg if msg.startswith(("got", "'", '"')) else f"got {_short(given)}; {msg}"
        else:
            msg = err["msg"].replace("Input should be", "allowed:")
            text = f"got {_short(given)}; {msg}"
        problems.append((path, text))
    return problems


# ---------------------------------------------------------------- resolution


def _validate_kind(
    section: str, raw: Any, registry: Any
) -> tuple[Any, list[tuple[str, str]]]:
    if not isinstance(raw, dict):
        return None, [(section, f"got {_short(raw)}; allowed: a table")]
    kind = raw.get("kind")
    if kind not in registry:
        given = "missing" if kind is None else f"got {_short(kind)}"
        return None, [(f"{section}.kind", f"{given}; allowed: {', '.join(registry.names())}")]
    cls = registry.get(kind)
    try:
        return cls.Settings.model_validate(raw), []
    except ValidationError as exc:
        return None, pydantic_problems(exc, (section,), cls.Settings)


def _validate_collect(raw: Any, provided: frozenset[Capability]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    out: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    if raw is None:  # the defaults
        for entry in COLLECTORS.entries():
            cls = COLLECTORS.get(entry.name)
            if cls.default_on and cls.needs <= provided:
                out[entry.name] = cls.Settings()
        return out, problems
    if not isinstance(raw, dict):
        return out, [("collect", f"got {_short(raw)}; allowed: a table of collector = {{ ... }}")]
    for name, conf in raw.items():
        path = fmt_path(("collect", name))
        if name not in COLLECTORS:
            problems.append((path, f"unknown collector; allowed: {', '.join(COLLECTORS.names())}"))
            continue
        if conf is False:
            continue
        if conf is True:
            conf = {}
        if not isinstance(conf, dict):
            problems.append((path, f"got {_short(conf)}; allowed: a table such as {{ interval = \"1s\" }}, true or false"))
            continue
        cls = COLLECTORS.get(name)
        if not cls.needs <= provided:
            problems.append((path, f"collector {name!r} needs {describe(cls.needs)}; the target provides "
                                   f"{describe(provided)}: drop it, or choose a target that provides it"))
            continue
        try:
            out[name] = cls.Settings.model_validate(conf)
        except ValidationError as exc:
            problems += pydantic_problems(exc, ("collect", name), cls.Settings)
    return out, problems


def _resolve(raw: dict[str, Any], combo: dict[str, Any]) -> tuple[RunSpec | None, list[tuple[str, str]]]:
    resolved = copy.deepcopy(raw)
    resolved.pop("factors", None)
    problems: list[tuple[str, str]] = []
    for path, value in combo.items():
        problems += set_path(resolved, path, value)
    if problems:
        return None, problems
    target, p1 = _validate_kind("target", resolved.get("target"), TARGETS)
    workload, p2 = _validate_kind("workload", resolved.get("workload"), WORKLOADS)
    problems = p1 + p2
    if target is None or workload is None:
        return None, problems
    target_cls = TARGETS.get(target.kind)
    workload_cls = WORKLOADS.get(workload.kind)
    provided = target_cls.endpoint_type.capabilities
    missing = workload_cls.needs - provided
    if missing:
        problems.append(
            (
                "workload.kind",
                f"workload {workload.kind!r} needs {describe(workload_cls.needs)}; target kind "
                f"{target.kind!r} provides {describe(provided)}: choose a target that provides "
                f"{describe(missing)}, or another workload",
            )
        )
        return None, problems
    problems += target_cls.validate_for_workload(target, workload_cls(workload))
    collect, p3 = _validate_collect(resolved.get("collect"), provided)
    problems += p3
    if problems:
        return None, problems
    return RunSpec(target, workload, collect, resolved), []


def split_factor_path(path: str) -> list[str]:
    """Dotted path to keys. After a `settings` key the rest is one name, since
    server setting names may contain dots (auto_explain.log_min_duration)."""
    parts = path.split(".")
    for i, part in enumerate(parts[:-1]):
        if part == "settings" and i > 0:
            return parts[: i + 1] + [".".join(parts[i + 1 :])]
    return parts


def set_path(doc: dict[str, Any], path: str, value: Any) -> list[tuple[str, str]]:
    parts = split_factor_path(path)
    where = fmt_path(("factors", path))
    if any(p == "" for p in parts):
        return [(where, "not a dotted path; allowed: e.g. \"workload.clients\"")]
    if parts[0] not in FACTOR_ROOTS or len(parts) < 2:
        return [(where, f"names nothing; a factor path starts with one of: {', '.join(r + '.' for r in FACTOR_ROOTS)}")]
    node: Any = doc
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node, dict):
            return [(where, f"names nothing: {'.'.join(parts[:i])} is not a table")]
        if part not in node:
            node[part] = {}
        node = node[part]
    if not isinstance(node, dict):
        return [(where, f"names nothing: {'.'.join(parts[:-1])} is not a table")]
    node[parts[-1]] = value
    return []


# ---------------------------------------------------------------- loading


def load_text(text: str, path: Path | None = None) -> Experiment:
    source = str(path) if path else "experiment file"
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{source}: not valid TOML: {exc}", "fix the TOML syntax at that line") from None
    problems: list[tuple[str, str]] = []
    try:
        model: FileModel | None = FileModel.model_validate(raw)
    except ValidationError as exc:
        model = None
        problems += pydantic_problems(exc, (), FileModel)

    factors: dict[str, list[Any]] = {}
    raw_factors = raw.get("factors", {})
    for fpath, values in (raw_factors.items() if isinstance(raw_factors, dict) else []):
        where = fmt_path(("factors", fpath))
        if not isinstance(values, list):
            problems.append((where, f"got {_short(values)}; allowed: a list of values, e.g. [1, 8, 32]"))
        elif not values:
            problems.append((where, "got []; allowed: a non-empty list of values"))
        elif len({json.dumps(v, sort_keys=True, default=str) for v in values}) != len(values):
            problems.append((where, f"got {_short(values)}; a value is listed twice: each must be distinct"))
        else:
            factors[fpath] = values
    if model is None or problems:
        # Report the target's and workload's problems too, not only the first section's.
        reported = {p for p, _ in problems}
        if isinstance(raw.get("target"), dict) and isinstance(raw.get("workload"), dict):
            _, more = _resolve(raw, {p: v[0] for p, v in factors.items()})
            problems += [(p, t) for p, t in more if p not in reported]
        raise SpecError(list(dict.fromkeys(problems)), source)
    assert model is not None

    for fpath, level in model.experiment.baseline.items():
        where = fmt_path(("experiment", "baseline", fpath))
        if fpath not in factors:
            problems.append((where, f"not a factor; allowed: {', '.join(json.dumps(f) for f in factors) or 'none'}"))
        elif level not in factors[fpath]:
            problems.append((where, f"got {_short(level)}; allowed: one of its levels, {_short(factors[fpath])}"))
    if problems:
        raise SpecError(problems, source)

    firsts = {p: v[0] for p, v in factors.items()}
    _, base_problems = _resolve(raw, firsts)
    # Each factor value alone, so a bad value is named by its index, and a
    # path that names nothing is named once.
    factor_problems: list[tuple[str, str]] = []
    for fpath, values in factors.items():
        at = fmt_path(split_factor_path(fpath))
        where = fmt_path(("factors", fpath))
        for i, value in enumerate(values):
            _, errs = _resolve(raw, firsts | {fpath: value})
            for err_path, text in errs:
                if err_path == at and text.startswith("unknown key"):
                    factor_problems.append((where, "names nothing: " + text))
                elif err_path == at or err_path.startswith(at + ".") or err_path.startswith(at + "["):
                    factor_problems.append((f"{where}[{i}]", text))
                elif (err_path, text) not in base_problems:
                    factor_problems.append((err_path, f"{text} (with {fpath} = {_short(value)})"))
    at_factors = {fmt_path(split_factor_path(p)) for p in factors}
    problems = [p for p in base_problems if p[0] not in at_factors] + factor_problems
    if problems:
        raise SpecError(list(dict.fromkeys(problems)), source)
    exp = Experiment(path=path, text=text, raw=raw, meta=model.experiment, factors=factors)
    # Every combination, for constraints between factors; each problem once.
    for combo in exp.combinations():
        _, errs = _resolve(raw, combo)
        with_ = ", ".join(f"{k} = {_short(v)}" for k, v in combo.items())
        problems += [(p, f"{t} (with {with_})") for p, t in errs]
    if problems:
        raise SpecError(list(dict.fromkeys(problems)), source)
    return exp


def load(path: str | Path) -> Experiment:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise UserError(f"{p}: no such experiment file", "give the path of an experiment .toml file") from None
    except IsADirectoryError:
        raise UserError(f"{p}: is a directory, not an experiment file", "give the path of an experiment .toml file") from None
    except (PermissionError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read: {exc}", "check the file's permissions and encoding (UTF-8)") from None
    return load_text(text, p)
