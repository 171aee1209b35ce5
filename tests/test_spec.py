"""Experiment files: every broken file gets one clear message and exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perflab import cli, spec
from perflab.errors import SpecError, UserError
from perflab.units import parse_duration_s

BROKEN = sorted((Path(__file__).parent / "data" / "broken").glob("*.toml"))
EXAMPLES = sorted((Path(__file__).parents[1] / "examples").glob("*.toml"))


def expected(path: Path) -> tuple[str, str]:
    """The file's first two lines: '# expect: <message fragment>' and
    '# names: <the dotted path the message must name>' (or 'line N' for a
    file that is not TOML at all)."""
    head = path.read_text().splitlines()[:2]
    m = re.match(r"# expect: (.*)", head[0])
    n = re.match(r"# names: (.*)", head[1]) if len(head) > 1 else None
    assert m and n, f"{path} must start with '# expect: <message fragment>' and '# names: <dotted path>'"
    return m.group(1), n.group(1)


@pytest.mark.parametrize("path", BROKEN, ids=[p.stem for p in BROKEN])
def test_broken_file_is_refused_with_a_clear_message(path: Path, run_cli, capsys) -> None:
    fragment, names = expected(path)
    where = names if names.startswith("at line ") else f"\n  {names}: "
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("perflab: error:")
    assert fragment in proc.stderr, proc.stderr
    assert where in proc.stderr, proc.stderr
    # `plan` refuses it the same way (in-process: the CLI's start-up costs more than the check).
    assert cli.main(["plan", str(path)]) == 2
    assert capsys.readouterr().err == proc.stderr


def test_corpus_is_not_empty() -> None:
    assert len(BROKEN) >= 20


def test_password_in_a_broken_file_is_not_echoed(run_cli) -> None:
    proc = run_cli("check", Path(__file__).parent / "data" / "broken" / "external_writes.toml", check=False)
    assert "hunter2" not in proc.stderr + proc.stdout


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_are_valid(path: Path) -> None:
    exp = spec.load(path)
    assert exp.combinations()


def test_every_problem_is_reported_not_only_the_first(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(
        '[experiment]\nname = "x"\nrepetitions = 0\n[target]\nkind = "postgres"\nbin_dirr = "/x"\n'
        '[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'
    )
    with pytest.raises(SpecError) as info:
        spec.load(f)
    paths = [p for p, _ in info.value.problems]
    assert "experiment.repetitions" in paths
    assert "target.bin_dirr" in paths


def test_missing_file_and_directory(run_cli, tmp_path: Path) -> None:
    for arg in (tmp_path / "nope.toml", tmp_path):
        proc = run_cli("check", arg, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and "fix:" in proc.stderr


def test_factor_paths_may_name_server_settings_with_dots(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(
        '[experiment]\nname = "x"\n[target]\nkind = "postgres"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'
        '[factors]\n"target.settings.auto_explain.log_min_duration" = ["10ms", "20ms"]\n'
    )
    exp = spec.load(f)
    run = exp.resolve(exp.combinations()[1])
    assert run.target.settings == {"auto_explain.log_min_duration": "20ms"}


def test_target_kind_can_be_a_factor_when_each_run_validates(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(
        '[experiment]\nname = "x"\n[target]\nkind = "postgres"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'
        '[factors]\n"target.kind" = ["postgres", "oracle"]\n'
    )
    with pytest.raises(SpecError) as info:
        spec.load(f)
    assert 'factors."target.kind"[1]' in str(info.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60), ("250ms", 0.25), ("1h30m", 5400), ("1.5m", 90), (12, 12), (0.5, 0.5), ("2d", 172800)],
)
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10 parsecs", "", "-1s", "1h30", True, "fast", "32d", 1e300, 10**400, "9" * 30 + "h"])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration_s(text)


@pytest.mark.parametrize("given", ['"five"', "-5", "true", '"5 parsecs"', "inf"])
def test_a_duration_is_refused_with_one_message_that_names_both_forms(tmp_path: Path, run_cli, given: str) -> None:
    """Anything that is no duration is refused the same way, naming the units
    a string takes."""
    f = tmp_path / "e.toml"
    f.write_text(f'[experiment]\nname = "d"\n[target]\nkind = "postgres"\n[workload]\nkind = "sql"\n'
                 f'statements = ["SELECT 1"]\nduration = {given}\n')
    proc = run_cli("check", f, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "workload.duration: " in proc.stderr
    assert 'allowed: a string with a unit of us, ms, s, m, h or d' in proc.stderr


@pytest.mark.parametrize("given", ["5000", '"5000"', "2.5"])
def test_a_bare_number_is_refused_with_the_fix(tmp_path: Path, run_cli, given: str) -> None:
    """`duration = "5000"` was silently 5,000 s: a duration carries its unit,
    and the refusal names the fix ("5000s"); a factor's level is refused alike."""
    f = tmp_path / "e.toml"
    base = '[experiment]\nname = "d"\n[target]\nkind = "postgres"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'
    number = given.strip('"')
    for text, where in ((base + f"duration = {given}\n", "workload.duration: "),
                        (base + f'[factors]\n"workload.duration" = ["1s", {given}]\n', 'factors."workload.duration"[1]')):
        f.write_text(text)
        proc = run_cli("check", f, check=False)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert where in proc.stderr and f'"{number}s"' in proc.stderr, proc.stderr


def test_a_stored_experiment_reads_bare_numbers_as_seconds() -> None:
    """An experiment stored before durations carried units is resumed and
    cleaned as it was written; zero needs no unit in a file."""
    base = '[experiment]\nname = "d"\n[target]\nkind = "postgres"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'
    bare = spec.load_text(base + "duration = 5\n", stored=True).resolve({}).workload.duration
    text = spec.load_text(base + 'duration = "5s"\n').resolve({}).workload.duration
    assert bare == text == 5.0
    assert spec.load_text(base + "duration = 1\n[collect]\nvmstat = { interval = 2 }\n", stored=True)
    assert spec.load_text(base + 'duration = "1s"\nwarmup = 0\n').resolve({}).workload.warmup == 0.0


def test_user_error_has_a_hint() -> None:
    err = UserError("broken", "do this")
    assert "fix: do this" in str(err)


def test_experiment_keeps_its_file_path(tmp_path: Path) -> None:
    f = tmp_path / "e.toml"
    f.write_text(
        '[experiment]\nname = "x"\n[target]\nkind = "postgres"\n[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\n'
        '[factors]\n"workload.iterations" = [1, 2]\n'
    )
    assert spec.load(f).path == f


PREFLIGHT = ["missing_bin_dir", "missing_sql_file", "data_dir_not_empty", "duckdb_path_is_a_directory"]


@pytest.mark.parametrize("name", PREFLIGHT)
def test_run_refuses_what_check_refuses_before_it_makes_anything(name: str, run_cli, tmp_path: Path) -> None:
    path = Path(__file__).parent / "data" / "broken" / f"{name}.toml"
    check = run_cli("check", path, check=False)
    run = run_cli("run", path, "--out", tmp_path / "out", "--quiet", check=False)
    assert check.returncode == run.returncode == 2, run.stdout + run.stderr
    assert run.stderr == check.stderr
    assert not (tmp_path / "out").exists()


def test_check_warns_of_the_collectors_a_run_would_skip(tmp_path: Path, run_cli) -> None:
    import sqlite3

    f = tmp_path / "e.toml"
    f.write_text(
        '[experiment]\nname = "skip"\n[target]\nkind = "duckdb"\n[workload]\nkind = "sql"\n'
        'statements = ["SELECT 1"]\nduration = "0.5s"\n[collect]\npgstat = true\n'
        'diskstats = { devices = ["perflab-no-such-disk"] }\nvmstat = true\n'
    )
    check = run_cli("check", f)
    warned = sorted(re.findall(r"perflab: warning: collect\.(\w+): a run would skip it", check.stderr))
    assert warned == ["diskstats", "pgstat"], check.stderr
    run_cli("run", f, "--out", tmp_path / "out", "--quiet", "--no-report")
    conn = sqlite3.connect(tmp_path / "out" / "perflab.sqlite")
    skipped = sorted(m.split(":")[0] for (m,) in conn.execute("SELECT message FROM event WHERE kind = 'collector-skipped'"))
    conn.close()
    assert skipped == warned


def test_a_factor_on_a_whole_section_sets_its_keys_together() -> None:
    text = """
[experiment]
name = "x"
[target]
kind = "postgres"
[workload]
kind = "tpcb"
clients = 1
[factors]
"workload" = [{ script = "select-only", clients = 8 }, { script = "tpcb-like" }]
"""
    exp = spec.load_text(text)
    runs = [exp.resolve(c).workload for c in exp.combinations()]
    assert [(w.script, w.clients) for w in runs] == [("select-only", 8), ("tpcb-like", 1)]
    # A level with its own kind is the whole section, validated whole (no clients = 1 from the file).
    whole = text.replace("clients = 1", "clients = 3").replace('{ script = "tpcb-like" }',
                                                              '{ kind = "tpcb", script = "tpcb-like" }')
    runs = [spec.load_text(whole).resolve(c).workload for c in spec.load_text(whole).combinations()]
    assert [(w.script, w.clients) for w in runs] == [("select-only", 8), ("tpcb-like", 1)]
    with pytest.raises(SpecError, match=r"factors\.workload\[1\]"):
        spec.load_text(text.replace('{ script = "tpcb-like" }', '{ kind = "tpcb", scale = "x" }'))
    with pytest.raises(SpecError, match="names nothing"):
        spec.load_text(text.replace('"workload" = [{ script = "select-only", clients = 8 }, { script = "tpcb-like" }]',
                                    '"workload" = [1, 2]'))


@pytest.mark.parametrize("target", [
    'kind = "postgres"',
    'kind = "mariadb"',
    'kind = "mysql"\ndsn = "mysql://u@127.0.0.1:3306/"\nallow_destructive = true',
    'kind = "duckdb"',
])
def test_a_workload_that_needs_one_of_two_wires_takes_either(tmp_path: Path, target: str) -> None:
    # oltp runs on PostgreSQL's wire or MySQL's: each such target is taken, and
    # DuckDB (SQL, neither wire) is refused naming both (check's exit 2: the corpus).
    f = tmp_path / "e.toml"
    f.write_text(f'[experiment]\nname = "x"\n[target]\n{target}\n[workload]\nkind = "oltp"\n')
    if "duckdb" in target:
        with pytest.raises(SpecError) as info:
            spec.load(f)
        assert info.value.problems == [("workload.kind", "workload 'oltp' needs sql and postgres-wire or mysql-wire; "
                                        "target kind 'duckdb' provides sql: choose a target that provides "
                                        "postgres-wire or mysql-wire, or another workload")]
    else:
        assert spec.load(f).combinations()
