"""The experiment file's keys from one source, the settings models: `perflab
keys`, `perflab schema` (the JSON Schema editors validate with) and
docs/keys.md list exactly what the models accept, and check names no
internal field."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from perflab import keys, tomldoc

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.toml"))
BROKEN = sorted((ROOT / "tests" / "data" / "broken").glob("*.toml"))
DIRECTIVE = "#:schema ../docs/perflab.schema.json"
# Bad files no schema of the file alone can judge, and why: what they get
# wrong is on the machine, in the server, or between keys.
NOT_BY_SCHEMA = {
    "bad_setting_name": "server setting names are the server binary's",
    "duckdb_unknown_setting": "server setting names are the server's",
    "reserved_setting": "server setting names are the server's",
    "duckdb_bad_memory_limit": "a server setting's value is the server's to judge",
    "nan_setting": "JSON has no NaN to refuse",
    "both_stop_rules": "two keys together",
    "external_with_settings": "two keys together",
    "external_writes": "two keys together",
    "capability_oltp_on_duckdb": "the target and workload together",
    "capability_tpcb_on_duckdb": "the target and workload together",
    "capability_tpcc_on_duckdb": "the target and workload together",
    "factor_bad_value": "a factor's level, validated where it lands",
    "factor_names_nothing": "a factor's path, validated where it lands",
    "huge_clients_factor": "a factor's level, validated where it lands",
    "factor_plan_too_large": "the plan's size",
    "plan_too_large": "the plan's size",
    "huge_duration": "a duration's bound (the string's value)",
    "huge_start_timeout": "a duration's bound (the string's value)",
    "tiny_interval": "a duration's bound (the string's value)",
    "path_too_long": "the file system's limits",
    "data_dir_not_empty": "the file system",
    "data_dir_under_a_file": "the file system",
    "wal_dir_not_empty": "the file system",
    "duckdb_path_is_a_directory": "the file system",
    "duckdb_path_is_root": "the file system",
    "missing_answers_dir": "the file system",
    "missing_bin_dir": "the file system",
    "missing_bin_dir_factor": "the file system",
    "missing_sql_file": "the file system",
    "unknown_run_as_user": "the machine's users",
}


def _inside(annotation: Any, path: str) -> set[str]:
    """The keys inside a value of this type: a model's, in a list ("[]") or
    a table of named values (".NAME")."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_paths(annotation, path)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return _inside(args[0], path + "[]")
    if origin is dict:
        return _inside(args[1], path + ".NAME")
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        return set().union(*(_inside(a, path) for a in (args[:1] if origin is typing.Annotated else args)))
    return set()


def model_paths(model: type[BaseModel], prefix: str) -> set[str]:
    """Every key a model accepts, walked from the model's fields (not its
    schema): aliases as the file writes them, nested models' keys below."""
    out = set()
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}"
        out |= {path} | _inside(field.annotation, path)
    return out


@pytest.mark.parametrize("section", keys.sections(), ids=lambda s: s.name)
def test_keys_lists_every_key_the_models_accept_and_nothing_else(section: keys.Section) -> None:
    listed = [k.path for k in keys.keys(section)]
    assert len(listed) == len(set(listed))
    assert set(listed) == model_paths(section.model, section.prefix)
    assert not [p for p in listed if p.split(".")[-1].endswith("_") or "from_" in p]


def test_keys_command_prints_a_kind_with_type_default_and_allowed(run_cli) -> None:
    out = run_cli("keys", "workload.http").stdout
    expected = model_paths(keys.find("workload.http")[0].model, "workload")
    assert {line.split()[0] for line in out.splitlines() if line.startswith("workload.")} == expected
    row = next(line for line in out.splitlines() if line.startswith("workload.clients "))
    assert "integer" in row and "16" in row and "10,000" in row
    assert "duration" in next(line for line in out.splitlines() if line.startswith("workload.latency_limit "))
    search = run_cli("keys", "[search]").stdout
    assert "search.from " in search and "from_" not in search
    bad = run_cli("keys", "workload.nosuch", check=False)
    assert bad.returncode == 2 and "workload.http" in bad.stderr and "Traceback" not in bad.stderr


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = keys.file_schema()
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_schema_validates_every_example(path: Path, validator: jsonschema.Draft7Validator) -> None:
    raw, _ = tomldoc.parse(path.read_text())
    assert [e.message for e in validator.iter_errors(raw)] == []
    # and the example names it, for editors (a TOML comment: check reads past it)
    assert path.read_text().splitlines()[0] == DIRECTIVE
    assert (path.parent / DIRECTIVE.split()[1]).is_file()


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_schema_rejects_each_bad_file_it_can(path: Path, validator: jsonschema.Draft7Validator) -> None:
    try:
        raw, problems = tomldoc.parse(path.read_text())
    except tomldoc.TomlProblem:
        pytest.skip("not TOML an editor could read either")
    errors = list(validator.iter_errors(raw))
    if path.stem in NOT_BY_SCHEMA:
        assert not errors, f"the schema judges {path.stem} now: take it off NOT_BY_SCHEMA"
    else:
        assert errors or problems, f"{path.stem} passes the schema"


def test_reference_and_schema_are_current() -> None:
    """docs/keys.md and docs/perflab.schema.json are what the models say now
    (regenerate: `perflab keys --markdown > docs/keys.md`,
    `perflab schema --output docs/perflab.schema.json`)."""
    fix = ("a settings model changed: run `perflab keys --markdown > docs/keys.md` and "
           "`perflab schema --output docs/perflab.schema.json`, and commit both")
    assert (ROOT / "docs" / "keys.md").read_text() == keys.markdown() + "\n", fix
    assert json.loads((ROOT / "docs" / "perflab.schema.json").read_text()) == keys.file_schema(), fix


def test_schema_command_writes_the_schema(run_cli, tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    run_cli("schema", "--output", out)
    assert json.loads(out.read_text()) == json.loads(run_cli("schema").stdout) == keys.file_schema()


BASE = '[experiment]\nname = "k"\n[target]\nkind = "postgres"\n[workload]\nkind = "tpcb"\nrate = 100\n'


def test_an_internal_name_is_neither_shown_nor_accepted(tmp_path: Path, run_cli) -> None:
    f = tmp_path / "e.toml"
    f.write_text(BASE + '[search]\nover = "workload.rate"\ngoal = "latency_p99_ms <= 5"\nfrom_ = 100\nto = 800\n'
                 'nosuch = 1\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "search.from_: unknown key" in proc.stderr
    assert "search.nosuch: unknown key; allowed: over, goal, from, to," in proc.stderr
    assert "from_," not in proc.stderr.replace("search.from_:", "")


def test_every_error_of_a_file_in_one_pass(tmp_path: Path, run_cli) -> None:
    """A typo under [collect] (or [host], [driver]) is reported with the
    target's and workload's errors, not after they are fixed."""
    f = tmp_path / "e.toml"
    f.write_text('[experiment]\nname = "k"\n[target]\nkind = "postgres"\nnosuch = 1\n[workload]\nkind = "tpcb"\n'
                 'clientz = 4\n[collect]\nvmstat = { intervall = "1s" }\n[host]\ndrop_cache = true\n'
                 '[driver]\nkind = "loca"\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2, proc.stderr
    for path in ("target.nosuch", "workload.clientz", "collect.vmstat.intervall", "host.drop_cache", "driver.kind"):
        assert f"\n  {path}: " in proc.stderr, proc.stderr


SQL = ('[experiment]\nname = "cost"\nrepetitions = 2\n[target]\nkind = "duckdb"\n[workload]\nkind = "sql"\n'
       'statements = ["SELECT 1"]\nwarmup = "2s"\n')


def test_check_and_plan_print_the_expected_wall_time(tmp_path: Path, run_cli) -> None:
    """runs x (warm-up + duration + restart) + loads, before anything runs."""
    from perflab import cost, spec

    f = tmp_path / "e.toml"
    f.write_text(SQL + '[factors]\n"workload.duration" = ["10s", "1m"]\n')
    estimate = cost.wall_time(spec.load(f))
    assert estimate.runs == estimate.timed == 4 and estimate.loads == 1
    assert estimate.total_s == 2 * (12 + 62) + 4 * cost.RESTART_S + cost.LOAD_S
    check = run_cli("check", f)
    assert f"expected wall time: about {cost._fmt(estimate.total_s)}" in check.stdout
    assert "warning" not in check.stderr
    plan = run_cli("plan", f)
    assert f"# expected wall time: about {cost._fmt(estimate.total_s)}" in plan.stdout


def test_runs_store_their_phases_and_plan_like_sets_the_estimate_beside_them(tmp_path: Path, run_cli) -> None:
    """Each run stores where its wall time went (wall.setup_s, prepare_s,
    measure_s, check_s: together within the run's seconds, the measured
    window within measure_s), and `plan --like DIR` puts DIR's runs beside
    what the model expected of them: the ratio over all and per block, and
    the plan's estimate at that pace."""
    import statistics

    from perflab import cost, spec
    from perflab.store import Store

    f = tmp_path / "e.toml"
    f.write_text(SQL.replace('warmup = "2s"', 'warmup = "0s"') + '[factors]\n"workload.duration" = ["1s", "2s"]\n')
    run_cli("run", f, "--out", tmp_path / "out", "--no-report", timeout=300)
    store = Store.open(tmp_path / "out", write=False)
    try:
        runs = store.runs()
        walls = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"]) if m["name"].startswith("wall.")}
                 for r in runs}
        durations = {r["id"]: float(str(r["factors"]["workload.duration"]).rstrip("s")) for r in runs}
    finally:
        store.close()
    assert [r["status"] for r in runs] == ["done"] * 4
    for r in runs:
        wall = walls[r["id"]]
        assert set(wall) == {"wall.setup_s", "wall.prepare_s", "wall.measure_s", "wall.check_s"}
        assert min(wall.values()) >= 0 and sum(wall.values()) <= r["seconds"]
        assert wall["wall.measure_s"] >= durations[r["id"]]
    plan = run_cli("plan", f, "--like", tmp_path / "out").stdout
    [line] = [x for x in plan.splitlines() if x.startswith("# measured in ")]
    estimate = cost.wall_time(spec.load(f))
    per_run = estimate.total_s / estimate.runs
    pace = sum(r["seconds"] for r in runs) / (per_run * 4)
    blocks = {b: sum(r["seconds"] for r in runs if r["repetition"] == b) / (per_run * 2) for b in (1, 2)}
    assert "4 finished runs" in line and f"x{pace:.2f} of what this model expected" in line
    assert f"block 1 x{blocks[1]:.2f}, block 2 x{blocks[2]:.2f}" in line
    assert f"this plan takes about {cost._fmt(estimate.total_s * pace)}" in line
    median = statistics.median(w["wall.measure_s"] for w in walls.values())
    assert f"measure {cost._fmt(median)}" in line
    # a directory with no store is refused with the fix, before the plan is printed
    bad = run_cli("plan", f, "--like", tmp_path / "none", check=False)
    assert bad.returncode == 2 and not bad.stdout and "fix:" in bad.stderr


def test_a_plan_of_more_than_an_hour_is_warned_of(tmp_path: Path, run_cli) -> None:
    f = tmp_path / "e.toml"
    f.write_text(SQL + 'duration = "40m"\n')
    check = run_cli("check", f)
    assert "expected wall time: about 1h20m" in check.stdout
    assert "perflab: warning: the plan is expected to take 1h20m, more than an hour" in check.stderr
    assert "workload.duration" in check.stderr  # names the fix


def test_runs_bounded_by_a_count_are_not_guessed(tmp_path: Path) -> None:
    from perflab import cost, spec

    f = tmp_path / "e.toml"
    f.write_text(SQL + "iterations = 5\n")
    estimate = cost.wall_time(spec.load(f))
    assert estimate.timed == 0 and estimate.runs == 2
    assert estimate.text().startswith("expected wall time: at least about") and "not counted" in estimate.text()


def test_check_refuses_a_goal_on_a_metric_the_run_does_not_store(tmp_path: Path, run_cli) -> None:
    """`tpmC >= 1000` on tpcb, or a misspelt percentile, passed check and ran
    probes that could never meet it: check refuses it, listing the metrics."""
    f = tmp_path / "e.toml"
    search = '[search]\nover = "workload.rate"\nfrom = 100\nto = 800\ngoal = "{}"\n'
    for goal, metric in (("tpmC >= 1000", "tpmC"), ("latency_p999_ms <= 5", "latency_p999_ms"),
                         ("tps >= 10 and pgstat.commits >= 1", "pgstat.commits")):
        f.write_text(BASE.replace("rate = 100\n", "") + '[collect]\nvmstat = true\n' + search.format(goal))
        proc = run_cli("check", f, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        line = next(x for x in proc.stderr.splitlines() if x.startswith("  search.goal: "))
        assert repr(metric) in line and "latency_p99_ms" in line and "tps" in line and "vmstat.*" in line, line
    f.write_text(BASE.replace("rate = 100\n", "") + search.format("latency_p99_9_ms <= 5 and tps >= 10"))
    assert "search.goal" not in run_cli("check", f, check=False).stderr


def _stored_names(path: Path) -> list[str]:
    """fnmatch patterns of the metric names a module's add()/add_metric()
    calls store ("latency_*_ms" for f"latency_{name}_ms")."""
    import ast

    def names(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            return ["".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)]
        if isinstance(node, ast.IfExp):
            return names(node.body) + names(node.orelse)
        return []

    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and (
                (isinstance(node.func, ast.Name) and node.func.id == "add")
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "add_metric")):
            out += names(node.args[0])
    return out


def test_declared_metrics_cover_what_each_workload_stores() -> None:
    """A workload's `metrics` (what check holds a search goal to) names every
    metric its code stores, so a goal on a real metric is never refused."""
    import fnmatch
    import inspect

    from perflab.workloads import WORKLOADS, harness

    declared = [k for k in WORKLOADS.names() if WORKLOADS.get(k).metrics]
    assert {"tpcb", "tpcc", "oltp", "stream", "http"} <= set(declared)
    shared = Path(inspect.getfile(harness)).parent
    for kind in declared:
        cls = WORKLOADS.get(kind)
        source = Path(inspect.getfile(cls))
        files = sorted(source.parent.glob("*.py")) if source.name == "__init__.py" else [source]
        files += [shared / "harness.py", shared / "stalls.py"]
        for name in {n for f in files for n in _stored_names(f)}:
            assert any(fnmatch.fnmatchcase(p, name) or fnmatch.fnmatchcase(name, p) for p in cls.metrics), (kind, name)


def test_check_refuses_driver_cpus_this_perflab_may_not_use(tmp_path: Path, run_cli) -> None:
    """driver.cpus outside perflab's CPUs failed every run at its pinning,
    after the load; check refuses it, naming the CPUs it may use."""
    import os

    f = tmp_path / "e.toml"
    outside = max(os.sched_getaffinity(0)) + 1
    f.write_text(SQL + f'duration = "1s"\n[driver]\ncpus = "{outside}"\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "\n  driver.cpus: " in proc.stderr and "allowed: CPUs of" in proc.stderr


def test_check_refuses_more_clients_than_a_managed_postgres_takes(tmp_path: Path, run_cli) -> None:
    """150 clients on a managed PostgreSQL of max_connections 100 lost clients
    in every run, after the load: check refuses it and names the setting."""
    f = tmp_path / "e.toml"
    base = '[experiment]\nname = "k"\n[target]\nkind = "postgres"\n{}[workload]\nkind = "tpcb"\nclients = 150\n'
    f.write_text(base.format(""))
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "\n  workload.clients: " in proc.stderr and "target.settings.max_connections" in proc.stderr
    f.write_text(base.format("[target.settings]\nmax_connections = 200\n"))
    assert "workload.clients" not in run_cli("check", f, check=False).stderr


def test_no_name_of_perflab_or_pydantic_in_a_refusal(tmp_path: Path, run_cli) -> None:
    """A value a union does not take is one problem at its own path in the
    file's words; a table given for a union's model is judged as that model."""
    f = tmp_path / "e.toml"
    f.write_text('[experiment]\nname = "k"\n[target]\nkind = "postgres"\n[target.storage]\ndata_fs = "x"\n'
                 '[workload]\nkind = "sql"\nstatements = [1, { name = "a" }]\n[host]\nhugepages = "x"\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2, proc.stderr
    for internal in ("FsSettings", "NamedStatement", "literal", "constrained", "instance of", ".str", "a valid"):
        assert internal not in proc.stderr, proc.stderr
    for path in ("target.storage.data_fs", "workload.statements[0]", "workload.statements[1].sql", "host.hugepages"):
        assert f"\n  {path}: " in proc.stderr, proc.stderr
    assert 'host.hugepages: got "x"; allowed: one of: an integer; "auto"' in proc.stderr
