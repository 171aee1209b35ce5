"""Stores written through the real Store API with made-up but plausible figures,
for report tests and benchmarks/report_500.py (no server needed).

The figures follow a model, not a measurement: TPS grows with clients up to
the cores and flattens, synchronous_commit=off is faster, and (durability)
each repetition loses a little. Nothing here is presented as a result.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np

from perflab.host import host_facts
from perflab.model import Event, Histogram, QueryTime, RunResult, SeriesPoint, labelled_levels
from perflab.plan import PlannedRun
from perflab.store import Store

SPEC = """\
[experiment]
name = "{name}"
description = "synthetic store for report tests"
repetitions = {repetitions}
order = "sequential"
seed = 7{primary_line}

[target]
kind = "postgres"
[target.settings]
shared_buffers = "128MB"{settings_lines}

[workload]
kind = "sql"
statements = ["SELECT 1"]
duration = "10s"

[factors]
{factor_lines}
"""


def quota_store(out: Path, text: str, name: str, measure: Callable[[PlannedRun], RunResult],
                fail: Collection[int] = ()) -> Path:
    """A store of the experiment file `text`, planned as perflab plans it
    (seed 7), on a factor target.resources.cpu_quota: each run's result is
    `measure`'s, in plan order; its target a postgres whose cpu.max is the
    run's quota; the runs numbered in `fail` are stored failed."""
    from perflab import plan, spec

    exp = spec.load_text(text, out / "e.toml")
    planned = plan.expand(exp, 7)
    store = Store.create(out, name=name, spec_text=text, spec_path=str(out / "e.toml"), seed=7,
                         factors=list(exp.factors), host=host_facts())
    store.add_plan(planned)
    for r in planned:
        store.start_run(r.number, 0)
        result = measure(r)
        target = {"kind": "postgres", "resources": {"limits": {"cpu.max": r.factors["target.resources.cpu_quota"]}}}
        store.finish_run(r.number, result, status="failed" if r.number in fail else "done", seconds=10.0,
                         target=target, error="failed" if r.number in fail else None)
    store.close()
    return out


def _toml(value: Any) -> str:
    """A value as TOML (inline tables for dicts)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def _encode_histogram(latencies_us: np.ndarray) -> Histogram:
    """An HDR histogram of modelled latencies, encoded by the engine."""
    from perflab import _engine

    return Histogram("latency", "us", "hdr-v2-deflate", bytes(_engine.hdr_encode([int(v) for v in latencies_us])))


def build_store(
    out_dir: Path,
    *,
    clients: list[int] = (1, 2, 4, 8),  # type: ignore[assignment]
    sync: list[str] = ("on", "off"),  # type: ignore[assignment]
    repetitions: int = 3,
    series_points: int = 20,
    degrade_pct_per_run: float = 0.0,
    fail_runs: tuple[int, ...] = (),
    client_bound_from: int | None = None,
    name: str = "synthetic",
    tps_scale: float = 1.0,
    histograms: bool = True,
    queries: int = 0,
    seed: int = 1,
    tps_noise: float = 0.015,
    zero_failures: bool = False,
    sync_described: dict[str, str] | None = None,
    flag_runs: dict[int, list[str]] | None = None,
    sync_fixed: str | None = None,
    state_sync: bool = True,
    table_factor: tuple[str, list[dict[str, Any]]] | None = None,
    run_seconds: float = 10.0,
    osdl_series: bool = False,
    primary: list[str] | None = None,
    latency_noise: float = 0.0,
) -> Path:
    """tps_noise: the runs' relative spread (SD of a normal factor);
    zero_failures: a headline metric "queries_failed" that is 0 in every run
    (a 0/0 ratio); sync_described: how the target describes each
    synchronous_commit level (PostgreSQL shows "true" as "on": two levels, one
    set-up); flag_runs: flags to store on runs by run number; sync_fixed:
    synchronous_commit of every run, not a factor: set in the file's
    [target.settings] (with state_sync=False, the file does not say it);
    table_factor: (path, levels) a factor whose levels are tables, after the others;
    run_seconds: each run's length, its series spread over it; osdl_series:
    vmstat's memory and I/O series too (free, buff, cache, bi, bo), as OSDL drew them;
    primary: the file's [experiment] primary; latency_noise: the mean
    latency's own relative spread beside the one it shares with tps (none:
    exactly clients/tps)."""
    rng = np.random.default_rng(seed)
    factors: dict[str, list[Any]] = {"workload.clients": list(clients)}
    if sync_fixed is None:
        factors["target.settings.synchronous_commit"] = list(sync)
    if table_factor is not None:
        factors[table_factor[0]] = table_factor[1]
    factor_lines = "\n".join(f'"{k}" = {_toml(v)}' for k, v in factors.items())  # the file, as written
    if table_factor is not None:  # the plan's levels: each table with its label, as spec.load gives them
        factors[table_factor[0]] = labelled_levels(table_factor[1])
    settings_lines = "" if sync_fixed is None or not state_sync else f"\nsynchronous_commit = {json.dumps(sync_fixed)}"
    store = Store.create(
        out_dir,
        name=name,
        spec_text=SPEC.format(name=name, repetitions=repetitions, factor_lines=factor_lines,
                              settings_lines=settings_lines,
                              primary_line="" if primary is None else f"\nprimary = {json.dumps(primary)}"),
        spec_path=str(out_dir / "experiment.toml"),
        seed=7,
        factors=list(factors),
        host=host_facts(),
    )
    combos = [dict(zip(factors, values, strict=True)) for values in itertools.product(*factors.values())]
    plan = [
        PlannedRun(number=i, combination=c, repetition=rep, factors=combo)
        for i, (c, rep, combo) in enumerate(
            ((c, rep, combo) for c, combo in enumerate(combos, start=1) for rep in range(1, repetitions + 1)),
            start=1,
        )
    ]
    store.add_plan(plan)
    for run in plan:
        store.start_run(run.number, 0)
        n_clients = run.factors["workload.clients"]
        sync_level = run.factors.get("target.settings.synchronous_commit", sync_fixed)
        described = (sync_described or {}).get(sync_level, sync_level)
        sync_on = described == "on"  # the model follows what the server ran
        base = (300.0 if sync_on else 520.0) * min(n_clients, 2) * (1 + 0.15 * np.log2(max(n_clients / 2, 1)))
        tps = base * tps_scale * (1 - degrade_pct_per_run / 100.0) ** (run.repetition - 1) * rng.normal(1.0, tps_noise)
        latency_ms = n_clients / tps * 1000.0
        if latency_noise:
            latency_ms *= rng.normal(1.0, latency_noise)
        result = RunResult(headline=["tps", "latency_mean_ms"] + (["queries_failed"] if zero_failures else []))
        if zero_failures:
            result.add_metric("queries_failed", 0.0, "queries", "queries that failed", False)
        result.add_metric("tps", tps, "tx/s", "transactions per second, connection set-up excluded", True)
        result.add_metric("latency_mean_ms", latency_ms, "ms", "mean transaction latency", False)
        result.add_metric("process.backend.cpu_s", 10.0 * min(n_clients, 2) * 0.6, "s", "", None)
        result.add_metric("process.walwriter.cpu_s", 0.3, "s", "", None)
        result.add_metric("process.driver.cpu_s", 10.0 * 0.25 * n_clients ** 0.5, "s", "", None)
        for i in range(series_points):
            t = (i + 1) * run_seconds / series_points
            result.series.append(SeriesPoint("sql", "tps", t, tps * rng.normal(1.0, 0.03)))
            result.series.append(SeriesPoint("sql", "latency_p99_ms", t, latency_ms * 3 * rng.normal(1.0, 0.05)))
            user = 40 + rng.normal(0, 3)
            for name, value in (("us_pct", user), ("sy_pct", 12.0), ("wa_pct", 3.0), ("st_pct", 0.0),
                                ("id_pct", 45.0 - (user - 40))):
                result.series.append(SeriesPoint("vmstat", name, t, value))
            if osdl_series:
                for name, value in (("free_kib", 4e6 - 1e3 * i), ("buff_kib", 2e5), ("cache_kib", 3e6 + 1e3 * i),
                                    ("bi_kib_per_s", 50.0 + rng.normal(0, 5)), ("bo_kib_per_s", 800.0)):
                    result.series.append(SeriesPoint("vmstat", name, t, value))
        if histograms:
            result.histograms.append(_encode_histogram(rng.lognormal(np.log(latency_ms * 1000), 0.5, size=2000)))
        for q in range(queries):
            result.queries.append(QueryTime(0, q + 1, f"q{q + 1}", float(rng.uniform(0.01, 0.2)), "ok",
                                            f"SELECT {q + 1}"))
        result.events.append(Event(0.0, "measure-start", "warm-up ended"))
        if client_bound_from is not None and n_clients >= client_bound_from:
            result.flags.append("client-bound")
        result.flags += (flag_runs or {}).get(run.number, [])
        target: dict[str, Any] = {
            "kind": "postgres",
            "version": "PostgreSQL 15.8 (synthetic)",
            "key_settings": {"shared_buffers": "128MB", "synchronous_commit": described, "fsync": "on"},
            "effective_settings": {"shared_buffers": "128MB", "max_connections": "100",
                                   "synchronous_commit": described},
            "requested_settings": {"synchronous_commit": sync_level},
            "postmaster_pid": 1000 + run.number,
            # as the postgres target declares them: no part of the set-up
            "setup_ignores": ["endpoint", "notes", "connection_settings", "requested_settings", "postmaster_pid"],
        }
        if run.number in fail_runs:
            store.finish_run(run.number, RunResult(), status="failed", seconds=1.5, target=target,
                             error="server closed the connection unexpectedly",
                             log_tail="LOG:  server process (PID 4242) was terminated by signal 9: Killed\n"
                                      "LOG:  terminating any other active server processes")
        else:
            store.finish_run(run.number, result, status="done", seconds=run_seconds, target=target)
    store.close()
    return out_dir
