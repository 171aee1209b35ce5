"""The harness's settings are one object from the experiment file to the
engine (issue 46, item 1): declared once in HarnessSettings (its names,
units, defaults), handed to the engine whole (`harness=`), read there by the
same names (crates/engine-py/src/harness.rs, SETTINGS) with no defaults of
its own, and stated by the stub (_engine.pyi's _HarnessSettings). These
tests fail when two of those layers disagree on a name, a unit, a default
or an allowed value."""

from __future__ import annotations

import ast
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from perflab import _engine
from perflab.workloads import WORKLOADS, harness
from perflab.workloads.harness import ENGINE_SETTINGS, HarnessSettings, engine_settings_of

STUB = Path(_engine.__file__).with_name("_engine.pyi")
WORKLOADS_DIR = Path(harness.__file__).parent
# A count per client, named by each workload (tpcb, oltp, tpcc: transactions; http: requests).
OWN_COUNT = "transactions"
# Where a workload's default differs from the harness's on purpose (any other difference fails
# here): oltp retries as sysbench does; http drives 16 clients as its studies do, and io_uring
# has not earned its default (workloads/http.py); tpcc derives its clients from its warehouses.
OVERRIDES = {("oltp", "max_tries"): 10, ("http", "clients"): 16, ("http", "io"): "epoll", ("tpcc", "clients"): None}
CONNINFO = "host=127.0.0.1 port=1 user=nobody dbname=none"  # never reached: every call here fails first


def engine_names() -> dict[str, str]:
    return dict(_engine.harness_settings())


def is_duration(model: type[HarnessSettings], name: str) -> bool:
    return '"format": "duration"' in json.dumps(model.model_json_schema()["properties"][name])


def stub_keys() -> dict[str, str]:
    tree = ast.parse(STUB.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_HarnessSettings"]
    return {n.target.id: ast.unparse(n.annotation) for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}


def test_the_engine_the_model_and_the_stub_name_the_same_settings() -> None:
    assert set(engine_names()) == set(ENGINE_SETTINGS) == set(stub_keys())
    fields = set(HarnessSettings.model_fields)
    assert set(ENGINE_SETTINGS) - {OWN_COUNT} <= fields


def test_each_setting_has_one_unit_seconds_for_every_duration() -> None:
    units = engine_names()
    for name in set(ENGINE_SETTINGS) - {OWN_COUNT}:
        assert (units[name] == "s") == is_duration(HarnessSettings, name), name
        model_type = typing.get_type_hints(HarnessSettings)[name]
        assert ("float" in str(model_type)) == ("float" in stub_keys()[name]), name


def test_the_engine_has_no_default_of_its_own_it_names_what_is_missing_or_unknown() -> None:
    whole = engine_settings_of(clients=1, duration=1.0)
    for name in ENGINE_SETTINGS:
        partial = {k: v for k, v in whole.items() if k != name}
        with pytest.raises(_engine.ConfigError, match=name):
            _engine.tpcb_run(CONNINFO, script="tpcb-like", scale=1, protocol="simple", t0_ns=0, harness=partial)
    with pytest.raises(_engine.ConfigError, match="warmup_s"):
        _engine.tpcb_run(CONNINFO, script="tpcb-like", scale=1, protocol="simple", t0_ns=0,
                         harness=dict(whole, warmup_s=1.0))


def literal_choices(name: str) -> tuple[Any, ...]:
    return typing.get_args(typing.get_type_hints(HarnessSettings)[name])


@pytest.mark.parametrize("name", ["schedule", "io", "pin"])
def test_every_value_the_model_allows_the_engine_reads_and_no_other(name) -> None:
    choices = literal_choices(name)
    assert len(choices) >= 2
    for value in choices:
        given = engine_settings_of(clients=1, duration=1.0, **{name: value})
        # past the harness's settings, the workload's own bad scale is what fails
        with pytest.raises(_engine.ConfigError, match="scale"):
            _engine.tpcb_run(CONNINFO, script="tpcb-like", scale=-1, protocol="simple", t0_ns=0, harness=given)
    bad = dict(engine_settings_of(clients=1, duration=1.0), **{name: "nope"})
    with pytest.raises(_engine.ConfigError, match=name):
        _engine.tpcb_run(CONNINFO, script="tpcb-like", scale=-1, protocol="simple", t0_ns=0, harness=bad)


def test_every_harness_workload_keeps_the_harness_defaults_but_its_declared_overrides() -> None:
    base = {name: f.default for name, f in HarnessSettings.model_fields.items()}
    seen = set()
    for kind in WORKLOADS.names():
        model = WORKLOADS.get(kind).Settings
        if not issubclass(model, HarnessSettings):
            continue
        for name, default in base.items():
            if name == "kind":
                continue
            mine = model.model_fields[name].default
            if (kind, name) in OVERRIDES:
                assert mine == OVERRIDES[kind, name], (kind, name)
                seen.add((kind, name))
            else:
                assert mine == default, f"workload {kind}: {name} = {mine!r}, the harness's is {default!r}"
            assert is_duration(model, name) == is_duration(HarnessSettings, name), (kind, name)
    assert seen == set(OVERRIDES)
    assert {"tpcb", "oltp", "tpcc", "http"} <= {k for k in WORKLOADS.names()
                                                 if issubclass(WORKLOADS.get(k).Settings, HarnessSettings)}


def engine_calls(path: Path) -> list[ast.Call]:
    """The workload's calls of a driver binding: engine_run(ctx, _engine.X_run, ...)."""
    tree = ast.parse(path.read_text())
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "engine_run"]


def test_workloads_pass_the_harness_settings_whole_and_by_no_other_name() -> None:
    old = {"duration_s", "warmup_s", "rate_tps", "latency_limit_ms"}
    calls = 0
    for path in sorted(WORKLOADS_DIR.rglob("*.py")):
        for call in engine_calls(path):
            calls += 1
            words = {k.arg for k in call.keywords if k.arg is not None}
            assert "harness" in words or any(k.arg is None for k in call.keywords), f"{path}:{call.lineno}"
            loose = words & (set(ENGINE_SETTINGS) | old)
            assert not loose, f"{path}:{call.lineno}: {sorted(loose)} beside the harness object"
    assert calls >= 4  # tpcb, oltp, tpcc (twice, through one dict), http


def test_a_workloads_settings_reach_the_engine_by_their_names_in_seconds() -> None:
    s = WORKLOADS.get("tpcb").Settings(kind="tpcb", clients=3, warmup="2s", latency_limit="250ms", rate=10,
                                       max_tries=4, io="epoll")
    given = s.engine_settings(threads=1, duration=5.0, transactions=None, seed=9)
    assert given == {"clients": 3, "threads": 1, "duration": 5.0, "transactions": None, "warmup": 2.0, "rate": 10.0,
                     "schedule": "poisson", "latency_limit": 0.25, "max_tries": 4, "seed": 9, "io": "epoll",
                     "pin": "auto", "follow": True}
    with pytest.raises(ValueError, match="warmup_s"):
        s.engine_settings(warmup_s=1.0)


def test_the_stream_senders_take_its_run_length_by_the_same_names() -> None:
    """stream_run keeps its own keywords (flows, a packet rate), but its
    duration and warm-up go by the names (and seconds) of the settings."""
    tree = ast.parse(STUB.read_text())
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "stream_run"]
    words = {a.arg for a in fn.args.kwonlyargs}
    stream = WORKLOADS.get("stream").Settings
    for name in ("duration", "warmup"):
        assert name in words and f"{name}_s" not in words
        assert is_duration(stream, name)
