"""The `sql` workload's stop rules, on a real DuckDB."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

EXPERIMENT = """
[experiment]
name = "sql-once"

[target]
kind = "duckdb"

[workload]
kind = "sql"
statements = ["SELECT 1", "SELECT 2"]
{stop}
"""


@pytest.mark.parametrize(("stop", "iterations"), [("", 1), ("iterations = 3", 3)])
def test_the_body_runs_once_without_iterations_or_a_duration(tmp_path: Path, run_cli: Any, stop: str,
                                                             iterations: int) -> None:
    # Neither key: the body runs once (it ran until cancelled before); iterations: that many times.
    spec = tmp_path / "e.toml"
    spec.write_text(EXPERIMENT.format(stop=stop))
    out = tmp_path / "out"
    run_cli("run", spec, "--out", out, "--quiet", timeout=120)
    conn = sqlite3.connect(out / "perflab.sqlite")
    metrics = {name: value for name, value in conn.execute("SELECT name, value FROM metric")}
    assert metrics["iterations"] == iterations
    assert conn.execute("SELECT count(*) FROM query").fetchone()[0] == 2 * iterations
