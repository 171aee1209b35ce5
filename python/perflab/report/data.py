"""The store read once into what the report and compare need: runs, metric
values, headline metrics, factor combinations and their summaries."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from perflab.analysis.blocks import blocks_of
from perflab.analysis.stats import NoiseFloor, Summary, noise_floor, summarize
from perflab.model import SETUP_IGNORES, fmt_factors, fmt_level, without_label
from perflab.store import Store

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@dataclass
class MetricInfo:
    name: str
    unit: str
    description: str = ""
    higher_is_better: bool | None = None
    methods: set[str] = field(default_factory=set)

    @property
    def estimated(self) -> bool:
        return any(m != "measured" for m in self.methods)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.unit})" if self.unit else self.name


@dataclass
class Combination:
    """One factor combination: its runs that finished, in the order they ran."""

    index: int
    factors: dict[str, Any]
    run_ids: list[int] = field(default_factory=list)  # done runs, by run number
    failed_ids: list[int] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)
    summaries: dict[str, Summary] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return combination_key(self.factors)

    def label(self, short: bool = True) -> str:
        if not self.factors:
            return "all runs"
        if short:
            return fmt_factors(self.factors, ", ")
        return ", ".join(f"{k}={fmt_level(v)}" for k, v in self.factors.items())


def flatten(prefix: str, value: object, out: dict[str, Any]) -> dict[str, Any]:
    """Nested dicts as dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value
    return out


def combination_key(factors: dict[str, Any]) -> str:
    return json.dumps(factors, sort_keys=True, default=str)


def applied(target: dict[str, Any]) -> dict[str, Any]:
    """A stored target description as dotted keys, less what it declares no
    part of the set-up (model.SETUP_IGNORES, in the description or any dict
    inside it, relative to that dict): what was applied. Nothing is left out
    by its name: a `wal_dir` is the set-up unless its target declared it a
    path of its own choosing."""
    flat = flatten("", target, {})
    ignored: set[str] = set()
    for key, listed in flat.items():
        if key == SETUP_IGNORES or key.endswith("." + SETUP_IGNORES):
            prefix = key[: -len(SETUP_IGNORES)]
            ignored.add(key)
            ignored.update(prefix + str(k) for k in listed or [])
    return {k: v for k, v in flat.items()
            if not any(k == i or k.startswith(i + ".") for i in ignored)}


def setup_key(run: dict[str, Any]) -> str | None:
    """The run's set-up as stored: every factor that is not the target's, and
    what the target applied as it described itself (`applied`). Two runs with
    one key ran one set-up, whatever their factor values said (0 rules of one
    type or another; "true" for "on"). None when the run stored no description."""
    target = run.get("target")
    if not isinstance(target, dict):
        return None
    others = {f: v for f, v in run["factors"].items() if f != "target" and not f.startswith("target.")}
    return json.dumps([others, applied(target)], sort_keys=True, default=str)


def primary_of(spec: dict[str, Any], metrics: dict[str, MetricInfo]) -> list[str]:
    """[experiment] primary of a stored experiment file, the names its runs
    stored; [] when it names none (or the file predates the key)."""
    section = spec.get("experiment")
    named = section.get("primary") if isinstance(section, dict) else None
    if not isinstance(named, list):
        return []
    return list(dict.fromkeys(m for m in named if isinstance(m, str) and m in metrics))


@dataclass
class ReportData:
    experiment: dict[str, Any]
    spec: dict[str, Any]  # the experiment file parsed ({} if it does not parse)
    runs: list[dict[str, Any]]
    values: dict[int, dict[str, float]]  # run id -> metric name -> value
    metrics: dict[str, MetricInfo]
    headline: list[str]
    factor_values: dict[str, list[Any]]  # factor path -> distinct values in plan order
    combinations: list[Combination]
    # The metrics of [experiment] primary that runs stored, in the file's
    # order: the experiment's question; [] when it names none.
    primary: list[str] = field(default_factory=list)

    @property
    def runs_by_id(self) -> dict[int, dict[str, Any]]:
        return {r["id"]: r for r in self.runs}

    def workload_kind(self, run: dict[str, Any]) -> str | None:
        kind = run["factors"].get("workload.kind") or self.spec.get("workload", {}).get("kind")
        return kind if isinstance(kind, str) else None

    def values_of(self, combo: Combination, metric: str) -> list[float]:
        return [self.values[r][metric] for r in combo.run_ids if metric in self.values.get(r, {})]

    def setups(self) -> list[list[Combination]]:
        """Combinations grouped by set-up: the combinations of one group ran
        one set-up (their done runs all have one setup_key). A combination
        whose runs disagree, or stored no description, is a group of its own."""
        cached = self.__dict__.get("_setups")
        if cached is not None:
            return list(cached)
        groups: dict[str, list[Combination]] = {}
        for combo in self.combinations:
            keys = {setup_key(self.runs_by_id[r]) for r in combo.run_ids}
            key = keys.pop() if len(keys) == 1 else None
            groups.setdefault(key if key is not None else f"combination {combo.index}", []).append(combo)
        self.__dict__["_setups"] = list(groups.values())
        return list(groups.values())

    def blocks(self) -> dict[int, int] | None:
        """Run id -> block when the plan ran in blocks (analysis.blocks.blocks_of), else None."""
        if "_blocks" not in self.__dict__:
            self.__dict__["_blocks"] = blocks_of(self.runs)
        found: dict[int, int] | None = self.__dict__["_blocks"]
        return found

    def equivalent_levels(self) -> list[list[Combination]]:
        """Groups of two or more combinations that resolve to one set-up."""
        return [g for g in self.setups() if len(g) > 1]

    def noise_floor(self, metric: str) -> NoiseFloor | None:
        """The spread of `metric` over runs of identical set-ups: each
        combination's repetitions, with those of combinations that resolve to
        the same set-up pooled into one group."""
        groups = [[v for c in group for v in self.values_of(c, metric)] for group in self.setups()]
        return noise_floor(groups)


def load(store: Store, seed: int | None = None) -> ReportData:
    experiment = store.experiment()
    try:
        spec = tomllib.loads(experiment["spec_text"])
    except (tomllib.TOMLDecodeError, TypeError):
        spec = {}
    runs = store.runs()
    # A run resumed after an interruption, retried after a failure, or run on
    # a fresh load carries it as a flag, so that every table that lists it
    # (and every workload's, which print a run's flags) marks it.
    marks = store.run_marks()
    for run in runs:
        run["flags"] = [*run["flags"], *(m for m in marks.get(run["id"], []) if m not in run["flags"])]
    values: dict[int, dict[str, float]] = {}
    metrics: dict[str, MetricInfo] = {}
    for row in store.metrics():
        if row["value"] is None:
            continue
        values.setdefault(row["run_id"], {})[row["name"]] = float(row["value"])
        info = metrics.get(row["name"])
        if info is None:
            hib = row["higher_is_better"]
            info = metrics[row["name"]] = MetricInfo(
                row["name"], row["unit"], row["description"], None if hib is None else bool(hib)
            )
        info.methods.add(row["method"])

    headline: list[str] = []
    for run in runs:
        for name in run["headline"]:
            if name not in headline and name in metrics:
                headline.append(name)
    if not headline:  # a workload that names none: every metric is shown
        headline = sorted(metrics)
    # [experiment] primary: the metrics the experiment asks about lead, in the file's order
    first = primary_of(spec, metrics)
    headline = first + [name for name in headline if name not in first]

    factor_names = list(experiment["factors"])
    factor_values: dict[str, list[Any]] = {name: [] for name in factor_names}
    combos: dict[int, Combination] = {}
    for run in runs:
        for name in factor_names:
            v = run["factors"].get(name)
            if v not in factor_values[name]:
                factor_values[name].append(v)
        combo = combos.setdefault(run["combination"], Combination(run["combination"], run["factors"]))
        if run["status"] == "done":
            combo.run_ids.append(run["id"])
            combo.flags.update(run["flags"])
        elif run["status"] == "failed":
            combo.failed_ids.append(run["id"])
    # levels in the file's order (a random plan runs them in any order): the
    # first is the baseline an effect is measured against
    file_levels = spec.get("factors", {}) if isinstance(spec.get("factors"), dict) else {}
    for name, seen in factor_values.items():
        listed = file_levels.get(name)
        if isinstance(listed, list):
            # matched by what each level sets, not its label: a derived label may
            # name what was found when the file was loaded (a bin_dir's server version)
            ordered = [v for level in listed for v in seen if without_label(v) == without_label(level)]
            ordered = [v for i, v in enumerate(ordered) if v not in ordered[:i]]
            factor_values[name] = ordered + [v for v in seen if v not in ordered]
    summary_seed = experiment["seed"] if seed is None else seed
    for combo in combos.values():
        for name in headline:
            vals = [values[r][name] for r in combo.run_ids if name in values.get(r, {})]
            if vals:
                combo.summaries[name] = summarize(vals, seed=summary_seed)
    return ReportData(
        experiment=experiment,
        spec=spec,
        runs=runs,
        values=values,
        metrics=metrics,
        headline=headline,
        factor_values=factor_values,
        combinations=[combos[k] for k in sorted(combos)],
        primary=first,
    )


def representative_run(data: ReportData, combo: Combination) -> int | None:
    """The done run of a combination whose first headline metric is nearest its
    median: the one shown when a figure has room for one run per combination."""
    if not combo.run_ids:
        return None
    if not data.headline:
        return combo.run_ids[0]
    metric = data.headline[0]
    scored = [(data.values.get(r, {}).get(metric), r) for r in combo.run_ids]
    scored = [(v, r) for v, r in scored if v is not None]
    if not scored:
        return combo.run_ids[0]
    scored.sort()
    return scored[(len(scored) - 1) // 2][1]
