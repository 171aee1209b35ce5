"""The experiment file: parsing, validation, and resolution per run.

An experiment file is TOML with the sections [experiment], [target],
[workload], [factors] and [collect] (see DESIGN.md), and optionally [host]
(machine settings perflab applies before a run and restores after:
perflab.hostctl.knobs) and [driver] (where perflab's own threads run). The target and workload
sections are validated by the settings model of their `kind`, looked up in the
registries; each factor path is substituted into the file and the result
validated again, so a factor that names nothing, or a value of the wrong type,
is an error before anything runs. Every problem is reported as a dotted path,
what was given, and what is allowed.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import math
import os
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from perflab import tomldoc
from perflab.analysis.precision import PILOT_BLOCKS, precision_fraction, precision_problems
from perflab.collectors import COLLECTORS
from perflab.endpoints import Capability, describe, describe_needs, unmet
from perflab.errors import SpecError, UserError
from perflab.hostctl.cgroups import format_cpu_list, parse_cpu_list
from perflab.hostctl.knobs import HostSettings, host_problems
from perflab.hostctl.netns import DriverNetwork, network_problems
from perflab.model import LABEL_KEY, LeafNamer, fmt_level, labelled_levels, without_label
from perflab.problems import pydantic_problems
from perflab.problems import short as _short
from perflab.registry import Registry
from perflab.search import SearchSettings, goal_problems, rounded
from perflab.settings_model import StrictModel
from perflab.targets import TARGETS
from perflab.tomldoc import TomlProblem, fmt_path
from perflab.units import FILE_CONTEXT, Duration
from perflab.workloads import WORKLOADS

if TYPE_CHECKING:
    from perflab.targets.base import Target, TargetSettings
    from perflab.workloads.base import Workload, WorkloadSettings

FACTOR_ROOTS = ("target", "workload", "collect", "host", "driver")
# Keys after which the rest of a factor path is one name: server settings
# (auto_explain.log_min_duration) and kernel settings (vm.dirty_ratio) have dots.
ONE_NAME_AFTER = ("settings", "sysctl")


NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# The most runs one experiment may plan (factor combinations x repetitions):
# 10,000 one-minute runs take a week. Past that a plan is most likely a typo,
# and check validates every combination before anything starts (about 0.25 ms
# each here), so the bound also keeps `perflab check` to seconds.
MAX_PLAN_RUNS = 10_000
# Ray actors of one distributed driver: each drives at least one client.
MAX_DRIVER_WORKERS = 1_000
# The validation context of the settings models: an experiment file's (a
# duration carries its unit), or None for an experiment stored before that
# rule (perflab.units.FILE_CONTEXT), which `resume` and `clean` read as it was.
_CONTEXT: ContextVar[dict[str, Any] | None] = ContextVar("spec_context", default=FILE_CONTEXT)


@contextlib.contextmanager
def _validating(stored: bool) -> Iterator[None]:
    token = _CONTEXT.set(None if stored else FILE_CONTEXT)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class ExperimentSection(StrictModel):
    # It names the output directory (results/NAME-TIMESTAMP).
    name: str = Field(json_schema_extra={"pattern": NAME_PATTERN.pattern})
    # A line saying what the experiment is for (the report shows it).
    description: str = ""
    # Runs of every factor combination.
    repetitions: int = Field(default=1, json_schema_extra={"minimum": 1, "maximum": MAX_PLAN_RUNS})
    # "blocks": each repetition is a block, every combination once in a fresh
    # seeded random order (the analysis pairs levels within blocks); "random"
    # shuffles the whole plan; "sequential" keeps each combination's runs
    # together. Default: "blocks" when factors are compared (two or more
    # combinations, two or more repetitions), else "sequential".
    order: Literal["blocks", "sequential", "random"] | None = None
    seed: int | None = None
    # "3%": add blocks after the pilot (the repetitions, 3 unless given) until
    # every headline comparison's (primary's, where named) 95% interval lies
    # within x or / 1.03 of its estimate (Stein's two-stage rule; perflab.analysis.precision), or the
    # budget is spent. Needs order "blocks" and a budget.
    precision: str | None = Field(default=None, json_schema_extra={"pattern": r"^\s*[0-9.]+\s*%\s*$"})
    # The experiment's most wall time with precision ("30m"): the pilot, then
    # whole blocks at the pilot's pace while it lasts.
    budget: Duration | None = None
    # factor path -> the level the report compares the others with (default: the first)
    baseline: dict[str, Any] = Field(default_factory=dict)
    # The metrics the experiment asks about (["tps"]), each a headline metric
    # of its workload or a metric of a collector that is on ("energy.joules").
    # Their comparisons are the question: the report's
    # answers, one false discovery rate family (Benjamini-Hochberg over them
    # alone) and the comparisons precision aims at. The other headline
    # metrics stay in the report as a second, secondary family. Default:
    # every headline metric, one family.
    primary: list[str] = Field(default_factory=list)
    # "fresh": every run of a workload that writes starts from its data as
    # loaded: the data set is loaded again before any run whose data an
    # earlier run used (TPC-C's orders and history grow run by run, so
    # a block's runs would otherwise differ by what ran before them, and
    # its consistency checks read more each run). Default "kept": loaded
    # once per server and data set, each run on what the runs before left.
    data: Literal["kept", "fresh"] = "kept"

    @field_validator("repetitions")
    @classmethod
    def _repetitions_in_plan_bound(cls, value: int) -> int:
        if not 1 <= value <= MAX_PLAN_RUNS:
            raise ValueError(f"got {value}; allowed: 1 to {MAX_PLAN_RUNS} (at most {MAX_PLAN_RUNS} runs in one experiment)")
        return value

    @field_validator("precision")
    @classmethod
    def _precision_is_a_percentage(cls, value: str | None) -> str | None:
        if value is not None and precision_fraction(value) is None:
            raise ValueError(f"got {value!r:.60}; allowed: a percentage above 0 and below 100, such as \"3%\"")
        return value

    @property
    def precision_fraction(self) -> float | None:
        """precision as a fraction (0.03), or None."""
        return None if self.precision is None else precision_fraction(self.precision)

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


class DriverSettings(StrictModel):
    """Where perflab itself (the Rust engine's threads included) runs."""

    # A CPU list ("1", "2-3,5"): the whole perflab process is pinned to it, so
    # the driver does not compete with a server given other CPUs
    # (target.resources.cpus). perflab warns when the two overlap.
    cpus: str | None = None
    # The driver's connections from a network namespace of perflab's own,
    # over a shaped veth link (perflab.hostctl.netns.DriverNetwork).
    network: DriverNetwork = Field(default_factory=DriverNetwork)
    # "local": the engine in perflab's process; "ray": `workers` Ray actors
    # (perflab.drivers.ray), each driving its share of the clients, on the Ray
    # cluster at `address` ("local": a private one started on this machine).
    kind: Literal["local", "ray"] = "local"
    address: str = "local"
    workers: int = Field(default=1, ge=1, le=MAX_DRIVER_WORKERS)

    @model_validator(mode="after")
    def _ray_keys_with_ray(self) -> DriverSettings:
        given = [k for k in ("address", "workers") if k in self.model_fields_set]
        if self.kind == "local" and given:
            raise ValueError(f"{' and '.join(given)} given with kind = \"local\"; allowed: only with kind = \"ray\"")
        if not self.address.strip():
            raise ValueError("address is empty; allowed: \"local\" or a Ray cluster's address (\"host:6379\")")
        return self

    @field_validator("cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is not None and not parse_cpu_list(value):
            raise ValueError(f"got {value!r}; allowed: a CPU list, e.g. \"1\" or \"2-3\"")
        return value


class FileModel(StrictModel):
    experiment: ExperimentSection
    # May be left out when a factor on the whole section gives every level's kind.
    target: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any]
    factors: dict[str, Any] = Field(default_factory=dict)
    collect: dict[str, Any] | None = None
    host: dict[str, Any] | None = None
    driver: dict[str, Any] | None = None
    search: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunSpec:
    """One run's fully resolved settings."""

    target: TargetSettings
    workload: WorkloadSettings
    collect: dict[str, Any]
    raw: dict[str, Any]
    host: HostSettings = field(default_factory=HostSettings)
    driver: DriverSettings = field(default_factory=DriverSettings)
    # What validation changed for this run and the user should know (`check` says it).
    notes: tuple[str, ...] = ()


@dataclass
class Experiment:
    path: Path | None
    text: str
    raw: dict[str, Any]
    meta: ExperimentSection
    factors: dict[str, list[Any]] = field(default_factory=dict)
    # [search]: the plan holds its first probe; the runner plans the next ones (perflab.search).
    search: SearchSettings | None = None
    # Read from a store (load_text's `stored`): bare numbers are seconds, as they were.
    stored: bool = False

    @property
    def name(self) -> str:
        return self.meta.name

    def resolve(self, combo: dict[str, Any]) -> RunSpec:
        """The settings of the run at one factor combination (already validated)."""
        with _validating(self.stored):
            spec, problems = _resolve(self.raw, combo)
        if problems or spec is None:  # validated at load; reaching here is a bug
            raise SpecError(problems or [("", "cannot resolve")])
        return spec

    def combinations(self) -> list[dict[str, Any]]:
        keys = list(self.factors)
        return [dict(zip(keys, values, strict=True)) for values in itertools.product(*self.factors.values())]


# ---------------------------------------------------------------- resolution


def _validate_kind(
    section: str, raw: object, registry: Registry
) -> tuple[Any, list[tuple[str, str]]]:
    if raw is None:
        return None, [(section, f"missing; give a [{section}] table with its kind (or a factor on \"{section}\" "
                       "whose levels give theirs)")]
    if not isinstance(raw, dict):
        return None, [(section, f"got {_short(raw)}; allowed: a table")]
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in registry:
        given = "missing" if kind is None else f"got {_short(kind)}"
        return None, [(f"{section}.kind", f"{given}; allowed: {', '.join(registry.names())}")]
    cls = registry.get(kind)
    try:
        return cls.Settings.model_validate(raw, context=_CONTEXT.get()), []
    except ValidationError as exc:
        return None, pydantic_problems(exc, (section,), cls.Settings)


def _validate_collect(raw: object, provided: frozenset[Capability]) -> tuple[dict[str, Any], list[tuple[str, str]]]:
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
        try:
            out[name] = cls.Settings.model_validate(conf, context=_CONTEXT.get())
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
        return None, problems + _other_sections(resolved)
    target_cls = TARGETS.get(target.kind)
    workload_cls = WORKLOADS.get(workload.kind)
    provided = target_cls.endpoint_type.capabilities
    missing = unmet(workload_cls.needs, workload_cls.needs_any, provided)
    if missing:
        problems.append(
            (
                "workload.kind",
                f"workload {workload.kind!r} needs {describe_needs(workload_cls.needs, workload_cls.needs_any)}; "
                f"target kind {target.kind!r} provides {describe(provided)}: choose a target that provides "
                f"{missing}, or another workload",
            )
        )
        return None, problems + _other_sections(resolved)
    problems += target_cls.validate_for_workload(target, workload_cls(workload))
    collect, p3 = _validate_collect(resolved.get("collect"), provided)
    problems += p3
    host, p4 = _validate_section("host", resolved.get("host"), HostSettings)
    driver, p5 = _validate_section("driver", resolved.get("driver"), DriverSettings)
    problems += p4 + p5
    if host is not None and host.hugepages == "auto" and not target_cls.sizes_huge_pages(target):
        problems.append(("host.hugepages", f"got \"auto\", which sizes the huge pages from a managed server's "
                         f"shared memory; target kind {target.kind!r} as given has none; allowed: a number of "
                         "huge pages"))
    if driver is not None and driver.network.namespace:
        remote = target_cls.remote_client_problem(target)
        if remote:
            problems.append(("driver.network.namespace", f"target kind {target.kind!r}: {remote}"))
    notes: list[str] = []
    if driver is not None and driver.kind == "ray" and driver.network.namespace:
        problems.append(("driver.network.namespace", "got true with kind = \"ray\": the namespace holds perflab's own "
                         "threads, not Ray's workers; allowed: one of them (Ray's workers on other machines are "
                         "remote clients already)"))
    if driver is not None and driver.kind == "ray":
        target, more, note = _distributed(target_cls, target, workload_cls, workload, driver)
        problems += more
        notes += [note] if note else []
    if problems or host is None or driver is None:
        return None, problems
    return RunSpec(target, workload, collect, resolved, host, driver, tuple(notes)), []


def _distributed(target_cls: type[Target], target: TargetSettings, workload_cls: type[Workload],
                 workload: WorkloadSettings, driver: DriverSettings
                 ) -> tuple[TargetSettings, list[tuple[str, str]], str | None]:
    """[driver] kind = "ray": a workload on the engine's harness, a target
    the workers reach over TCP, at least one client per worker."""
    if not workload_cls.distributable:
        distributable = [n for n in WORKLOADS.names() if WORKLOADS.get(n).distributable]
        return target, [("driver.kind", f"got \"ray\"; workload {workload.kind!r} does not run on the engine's "
                         f"load harness; allowed: \"local\", or a workload that does ({', '.join(distributable)})")], None
    problems = []
    from perflab.workloads.harness import HarnessSettings

    clients = workload.clients if isinstance(workload, HarnessSettings) else None
    if isinstance(clients, int) and clients < driver.workers:
        problems.append(("driver.workers", f"got {driver.workers}, more than workload.clients = {clients}; "
                         "allowed: at most one worker per client"))
    target, more, note = target_cls.for_distributed_driver(target)
    return target, problems + more, note


def _other_sections(resolved: dict[str, Any]) -> list[tuple[str, str]]:
    """The problems of [collect], [host] and [driver] alone, when the target
    or workload has its own: every error of a file is reported in one pass."""
    collect = resolved.get("collect")
    problems = _validate_collect(collect, frozenset())[1] if collect is not None else []
    problems += _validate_section("host", resolved.get("host"), HostSettings)[1]
    return problems + _validate_section("driver", resolved.get("driver"), DriverSettings)[1]


def _validate_section(section: str, raw: object, model: type[StrictModel]) -> tuple[Any, list[tuple[str, str]]]:
    if raw is None:
        return model(), []
    if not isinstance(raw, dict):
        return None, [(section, f"got {_short(raw)}; allowed: a table")]
    try:
        return model.model_validate(raw, context=_CONTEXT.get()), []
    except ValidationError as exc:
        return None, pydantic_problems(exc, (section,), model)


def split_factor_path(path: str) -> list[str]:
    """Dotted path to keys. After a `settings` or `sysctl` key the rest is one
    name (ONE_NAME_AFTER)."""
    parts = path.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in ONE_NAME_AFTER and i > 0:
            return parts[: i + 1] + [".".join(parts[i + 1 :])]
    return parts


def set_path(doc: dict[str, Any], path: str, value: object) -> list[tuple[str, str]]:
    value = without_label(value)  # a table level's label names it; it sets nothing
    parts = split_factor_path(path)
    where = fmt_path(("factors", path))
    if any(p == "" for p in parts):
        return [(where, "not a dotted path; allowed: e.g. \"workload.clients\"")]
    if len(parts) == 1 and parts[0] in ("target", "workload") and isinstance(value, dict):
        # A factor on a whole section sets several of its keys together (levels
        # that are not a full cross: e.g. a receiver design only for TCP).
        section = doc.setdefault(parts[0], {})
        if not isinstance(section, dict):
            return [(where, f"names nothing: {parts[0]} is not a table")]
        if "kind" in value:
            # A level that carries its own kind is the whole section (the server
            # as a factor: nginx against a `process` server), validated whole.
            doc[parts[0]] = dict(value)
            return []
        section.update(value)
        return []
    if parts[0] not in FACTOR_ROOTS or len(parts) < 2:
        return [(where, f"names nothing; a factor path starts with one of: {', '.join(r + '.' for r in FACTOR_ROOTS)}")]
    node: object = doc
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


def load_text(text: str, path: Path | None = None, stored: bool = False) -> Experiment:
    """The experiment of a file's text; `stored`: a text from a store, whose
    durations may be bare numbers of seconds (the rule before they carried units)."""
    with _validating(stored):
        exp = _load_text(text, path)
    exp.stored = stored
    return exp


def _load_text(text: str, path: Path | None) -> Experiment:
    source = str(path) if path else "experiment file"
    try:
        raw, problems = tomldoc.parse(text)
    except TomlProblem as exc:
        if not exc.path:
            raise UserError(f"{source}: {exc.text}", "fix the TOML syntax at that line") from None
        raise SpecError([(exc.path, exc.text)], source) from None
    if problems:  # numbers out of range, deep nesting: nothing else can be trusted
        raise SpecError(problems, source)
    try:
        model: FileModel | None = FileModel.model_validate(raw, context=_CONTEXT.get())
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
            problems += _label_problems(where, values)
    search, search_problems = _search(raw, model, factors)
    problems += search_problems
    if model is None or problems:
        # Report the target's and workload's problems too, not only the first section's.
        reported = {p for p, _ in problems}
        _, more = _resolve(raw, {p: v[0] for p, v in factors.items()})
        problems += [(p, t) for p, t in more if p not in reported]
        raise SpecError(list(dict.fromkeys(problems)), source)
    assert model is not None
    combinations = math.prod(len(v) for v in factors.values())
    runs = combinations * model.experiment.repetitions
    if runs > MAX_PLAN_RUNS:
        where = "factors" if combinations > MAX_PLAN_RUNS else "experiment.repetitions"
        raise SpecError([(where, f"got {combinations} factor combination(s) x {model.experiment.repetitions} "
                          f"repetition(s) = {runs} runs; allowed: at most {MAX_PLAN_RUNS} runs in one experiment "
                          "(split it into several)")], source)

    for fpath, level in model.experiment.baseline.items():
        where = fmt_path(("experiment", "baseline", fpath))
        if fpath not in factors:
            problems.append((where, f"not a factor; allowed: {', '.join(json.dumps(f) for f in factors) or 'none'}"))
        elif without_label(level) not in [without_label(v) for v in factors[fpath]]:
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
                    # the key inside the level, where the problem is one ("factors.target[1].command")
                    factor_problems.append((f"{where}[{i}]{err_path[len(at):]}", text))
                elif (err_path, text) not in base_problems:
                    factor_problems.append((err_path, f"{text} (with {fpath} = {_short(value)})"))
    at_factors = {fmt_path(split_factor_path(p)) for p in factors}
    problems = [p for p in base_problems if p[0] not in at_factors] + factor_problems
    if problems:
        raise SpecError(list(dict.fromkeys(problems)), source)
    # every table level carries its label from here on: the plan, the store and every reader show it
    labelled = {fpath: labelled_levels(values, _leaf_namer(raw, fpath), fpath) for fpath, values in factors.items()}
    meta = model.experiment
    named = raw.get("experiment")
    if meta.precision is not None and not (isinstance(named, dict) and "repetitions" in named):  # the pilot
        meta = meta.model_copy(update={"repetitions": PILOT_BLOCKS})
    if meta.order is None:  # blocks whenever factors are compared
        compared = meta.repetitions > 1 and math.prod(len(v) for v in labelled.values()) > 1
        meta = meta.model_copy(update={"order": "blocks" if compared else "sequential"})
    problems += precision_problems(meta, math.prod(len(v) for v in labelled.values()), search is not None)
    exp = Experiment(path=path, text=text, raw=raw, meta=meta, factors=labelled, search=search)
    # Every combination, for constraints between factors; each problem once.
    offered: dict[str, None] | None = {}  # the workloads' headline metrics, for primary
    for combo in exp.combinations():
        resolved, errs = _resolve(raw, combo)
        with_ = ", ".join(f"{k} = {_short(v)}" for k, v in combo.items())
        problems += [(p, f"{t} (with {with_})") for p, t in errs]
        if resolved is not None:
            # a workload that names no headline metric shows every metric it has: any name may be one;
            # a collector's metrics ("energy.joules") are its own to name
            named = WORKLOADS.get(resolved.workload.kind).headline
            offered = None if offered is None or not named else \
                offered | dict.fromkeys(named) | {f"{c}.*": None for c in resolved.collect}
    problems += _primary_problems(meta.primary, None if offered is None else list(offered))
    if problems:
        raise SpecError(list(dict.fromkeys(problems)), source)
    return exp


def _primary_problems(primary: list[str], offered: list[str] | None) -> list[tuple[str, str]]:
    """[experiment] primary: each name once, each a headline metric of the
    experiment's workloads or a metric of a collector that is on ("NAME.*"
    in `offered`); `offered` None: a workload names no headline metric, so
    any name may be one."""
    out = []
    for i, name in enumerate(primary):
        where = fmt_path(("experiment", "primary")) + f"[{i}]"
        if name in primary[:i]:
            out.append((where, f"got {name!r} twice: name each metric once"))
        elif offered is not None and name not in offered and f"{name.partition('.')[0]}.*" not in offered:
            out.append((where, f"got {name!r}; allowed: a headline metric of this experiment's workload, "
                        f"{', '.join(repr(m) for m in offered)}"))
    return out


def _search(raw: dict[str, Any], model: FileModel | None,
            factors: dict[str, list[Any]]) -> tuple[SearchSettings | None, list[tuple[str, str]]]:
    """[search]: its settings, and its path made the one factor, its first
    probe the one level (`to` is validated too, as a level of its own)."""
    given = raw.get("search") if model is None else model.search
    if not isinstance(given, dict):  # none, or not a table (FileModel says so)
        return None, []
    try:
        search = SearchSettings.model_validate(given)
    except ValidationError as exc:
        return None, pydantic_problems(exc, ("search",), SearchSettings)
    if model is None:  # the file's other problems first; the search's own are reported with them
        return None, []
    problems = []
    if factors:
        problems.append(("factors", f"got {', '.join(json.dumps(f) for f in factors)} with [search]; allowed: no "
                         "factors in a search's experiment (it varies search.over itself; compare servers with "
                         "one search each)"))
    if model.experiment.repetitions != 1:
        problems.append(("experiment.repetitions", f"got {model.experiment.repetitions} with [search]; allowed: 1 "
                         "(search.repetitions says how often the boundary rate runs)"))
    if not problems:
        at = fmt_path(split_factor_path(search.over))
        for value in (search.to, search.from_):
            _, errs = _resolve(raw, {search.over: rounded(value)})
            if errs and float(value).is_integer() and not _resolve(raw, {search.over: int(value)})[1]:
                # a path of whole numbers (workload.clients): the bisection's probes fall between them
                problems = [("search.over", f"got {search.over!r}, which takes whole numbers only, and a search "
                             "bisects between its probes (1.5 between 1 and 2); allowed: a numeric path that "
                             "takes any number, a rate such as workload.rate")]
                break
            problems += [("search.over" if p == at or "names nothing" in t else p,
                          f"{t} (with {search.over} = {rounded(value):g})") for p, t in errs]
        if not problems:
            run, _ = _resolve(raw, {search.over: rounded(search.from_)})
            if run is not None:  # the goal's metrics: ones the workload and the collectors store
                problems += goal_problems(search, run.workload.kind, WORKLOADS.get(run.workload.kind).metrics,
                                          run.collect, COLLECTORS.names())
        if not problems:
            factors[search.over] = [rounded(search.from_)]
    return search, list(dict.fromkeys(problems))


def _leaf_namer(raw: dict[str, Any], fpath: str) -> LeafNamer:
    """Names a level's target.bin_dir or target.version (in a table level, or
    as the factor itself) by the server it runs ("PostgreSQL 18.6"), asked of
    that binary when the file is loaded; None where none runs here (the label
    is then the value, or the path's last components). A target setting the
    target's class names in labels (its setting_label: Apache's mpm, h2o's
    threads) reads as it says ("prefork", "2 threads"), not key=value."""
    target = raw.get("target")
    kind = target.get("kind") if isinstance(target, dict) else None

    def name(key: str, value: object, level: dict[str, Any]) -> str | None:
        full = key if key == fpath else f"{fpath}.{key}"
        if full.startswith("target.settings.") and full.count(".") == 2:
            server = level.get("kind", kind) if fpath == "target" else kind
            try:
                label = getattr(TARGETS.get(server), "setting_label", None) if isinstance(server, str) \
                    and server in TARGETS else None
            except ImportError:
                return None
            named = label(full.rsplit(".", 1)[-1], value) if callable(label) else None
            # a value factor labelled only where the label says more than the value
            return named if named != fmt_level(value) or key != fpath else None
        if full == "target.kind" and isinstance(value, str) and value in TARGETS:
            # a server kind by the server and the version it runs ("Apache 2.4.71"), where it says
            try:
                label = getattr(TARGETS.get(value), "server_label", None)
            except ImportError:  # a kind whose library is missing: check says so
                return None
            return label() if callable(label) else None
        if full == "target.bin_dir" and kind == "mariadb" and isinstance(value, str):
            from perflab.targets.mariadb import version_label

            return version_label(value)  # "MariaDB 10.11.19"
        if full not in ("target.bin_dir", "target.version") or kind not in (None, "postgres"):
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            return None
        from perflab.targets.postgres import server_label

        return server_label(bin_dir=str(value)) if full == "target.bin_dir" else server_label(version=str(value))

    return name


def _label_problems(where: str, values: list[Any]) -> list[tuple[str, str]]:
    """A table level's `label`: a non-empty string, distinct within its factor."""
    problems = []
    seen: dict[str, int] = {}
    for i, value in enumerate(values):
        if not isinstance(value, dict) or LABEL_KEY not in value:
            continue
        label = value[LABEL_KEY]
        if not isinstance(label, str) or not label.strip():
            problems.append((f"{where}[{i}].{LABEL_KEY}", f"got {_short(label)}; allowed: a short non-empty string "
                             "that names the level in tables and figures"))
        elif label in seen:
            problems.append((f"{where}[{i}].{LABEL_KEY}", f"got {_short(label)}, the label of level {seen[label]} "
                             "too; allowed: a label of its own"))
        else:
            seen[label] = i
    return problems


def preflight(exp: Experiment, base_dir: Path, connect: bool = False) -> list[str]:
    """Every check of the plan's targets and workloads that needs nothing
    started (binaries and paths the file names, privileges), each distinct
    setting once, so `check` refuses what `run` would refuse before its first run.
    With `connect` (`check`, `plan`, and `run` before it makes the output directory),
    each distinct external target is also reached once (`Target.reach`): a
    wrong password or a server that is down is refused here, not at run 1.
    `base_dir` is the experiment file's directory (relative paths start there).
    Returns warnings: collectors a run would skip, and why."""
    problems: list[tuple[str, str]] = []
    warnings: list[str] = []
    seen: set[str] = set()
    additions: dict[Path, int] = {}  # cache entries the runs would add, and their estimated sizes
    for combo in exp.combinations():
        run = exp.resolve(combo)
        provided = TARGETS.get(run.target.kind).endpoint_type.capabilities
        for name, settings in run.collect.items():
            key = f"collector:{name}:{describe(provided)}:{settings.model_dump_json()}"
            if key not in seen:
                seen.add(key)
                cls = COLLECTORS.get(name)
                # A collector the target cannot serve is skipped by the run, not
                # refused: target.kind may be a factor (TPC-H on PostgreSQL and
                # DuckDB with pgstat), and the other runs still want it.
                reason = (f"it needs {describe(cls.needs)} and the target provides {describe(provided)}"
                          if not cls.needs <= provided else cls.preflight(settings, provided))
                if not reason:  # a run would start it: a library it imports must be there
                    problems += [(fmt_path(("collect", name)), p) for p in COLLECTORS.library_problems(name)]
                if reason:
                    warnings.append(f"{fmt_path(('collect', name))}: a run would skip it: {reason}")
        key = f"host:{run.host.model_dump_json()}"
        if key not in seen:
            seen.add(key)
            problems += host_problems(run.host)
        key = f"network:{run.driver.network.model_dump_json()}"
        if key not in seen:
            seen.add(key)
            problems += network_problems(run.driver.network)
        key = f"driver:{run.driver.model_dump_json()}:{run.target.model_dump_json()}"
        if key not in seen:
            seen.add(key)
            more, notes = _driver_preflight(run)
            problems += more + _driver_cpus_problems(run.driver.cpus)
            warnings += [n for n in notes if n not in warnings]
        for settings, registry in ((run.target, TARGETS), (run.workload, WORKLOADS)):
            key = f"{registry.what}:{settings.model_dump_json()}"
            if key not in seen:
                seen.add(key)
                kind = registry.get(settings.kind)
                # a library the kind imports, before any check that would import it (reach)
                found = [(f"{registry.what}.kind", p) for p in registry.library_problems(settings.kind)]
                try:
                    found = found or kind.preflight(settings, base_dir)
                except (OSError, ValueError) as exc:  # a path the OS refuses outright (too long, ...)
                    found = [(registry.what, f"cannot check its paths: {_short(str(exc))}; "
                              "allowed: paths this system takes")]
                if connect and registry is TARGETS and not found:
                    found = kind.reach(settings)
                problems += found
                if registry is TARGETS and not found:
                    warnings += [n for n in kind.preflight_notes(settings) if n not in warnings]
        key = f"cache:{run.workload.model_dump_json()}:{run.target.kind}"
        if key not in seen:
            seen.add(key)
            additions.update(WORKLOADS.get(run.workload.kind).cache_additions(run.workload, run.target, base_dir))
    if problems:
        raise SpecError(list(dict.fromkeys(problems)), str(exp.path) if exp.path else "experiment file")
    return warnings + cache_warnings(additions)


def cache_warnings(additions: dict[Path, int]) -> list[str]:
    """A warning per filesystem where the cache entries the plan would add
    (estimated from their parameters) need more than is free."""
    from perflab.cache import free_bytes
    from perflab.units import format_size

    by_disk: dict[int, tuple[Path, int, int]] = {}  # device -> (a cache directory, bytes free, bytes to add)
    for entry, nbytes in additions.items():
        try:
            existing, free = free_bytes(entry.parent)
            dev = existing.stat().st_dev
        except OSError:
            continue  # a path the run itself will refuse, with its own message
        where, free, total = by_disk.get(dev, (entry.parent, free, 0))
        by_disk[dev] = (where, free, total + nbytes)
    return [f"cache: the runs would add about {format_size(total)} under {where} (an estimate from the "
            f"file sets' parameters), and its disk has {format_size(free)} free; fix: free space there "
            "(`perflab cache prune`), or move the cache to a larger disk (PERFLAB_CACHE, or "
            "workload.fileset.cache_dir)"
            for where, free, total in by_disk.values() if total > free]


def _driver_cpus_problems(cpus: str | None) -> list[tuple[str, str]]:
    """driver.cpus within the CPUs this perflab may run on: else every run
    would fail to pin the driver (perflab.hostrun), after the load."""
    if cpus is None:
        return []
    allowed = os.sched_getaffinity(0)
    outside = parse_cpu_list(cpus) - allowed
    if not outside:
        return []
    return [("driver.cpus", f"got {cpus!r}: CPU {format_cpu_list(outside)} is not one perflab may run on here; "
             f"allowed: CPUs of {format_cpu_list(allowed)}")]


def _driver_preflight(run: RunSpec) -> tuple[list[tuple[str, str]], list[str]]:
    """A distributed driver needs Ray installed; a managed server on 127.0.0.1
    is out of reach of workers on other machines (a warning: the cluster at
    `address` may be this machine alone)."""
    from perflab.drivers import RAY_EXTRA_HINT, ray_installed
    from perflab.extras import problem

    if run.driver.kind != "ray":
        return [], []
    if not ray_installed():
        return [("driver.kind", f"got \"ray\", which needs Ray, and Ray is not installed; fix: {RAY_EXTRA_HINT}")], []
    if (broken := problem("ray", 'driver.kind = "ray"')) is not None:
        return [("driver.kind", broken)], []
    notes = list(run.notes)
    if run.driver.address != "local" and not TARGETS.get(run.target.kind).reachable_off_host(run.target):
        notes.append(f"driver.address: workers of the cluster at {run.driver.address!r} on other machines cannot "
                     "reach a managed server, which listens on 127.0.0.1 only; for a multi-node cluster give "
                     "an external target (dsn) whose host every node reaches")
    return [], notes


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
