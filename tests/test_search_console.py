"""What a search and a load say on the console (issue 45, item 5): a counter
that does not read past its plan, a line when the load phase starts and ends,
and probes shown by rate."""

from __future__ import annotations

import io
import re
from pathlib import Path

from perflab import search
from perflab.host import host_facts
from perflab.model import LoadResult, RunResult
from perflab.plan import PlannedRun
from perflab.progress import Progress
from perflab.section import Table
from perflab.store import Store
from perflab.workloads.tpcb import TpcbSettings, TpcbWorkload

SEARCH = """
[experiment]
name = "probes"
[target]
kind = "postgres"
[workload]
kind = "tpcb"
script = "select-only"
[search]
over = "workload.rate"
goal = "latency_p99_ms <= 5"
from = 500
to = 5000
max_probes = 7
"""


def test_a_search_counter_does_not_read_past_its_plan() -> None:
    out = io.StringIO()
    p = Progress(1, out=out, probes=7)
    p.start()
    for number in (1, 2, 3):
        p.total = max(p.total, number)  # as plan.planned grows it, a probe at a time
        p.run_start(number, {"workload.rate": 500 * number}, 1)
        p.run_end(number, "done", "")
    text = out.getvalue()
    first = text.splitlines()[0]
    assert "1 run" in first and "7" in first and "search.max_probes" in first, text
    # no run reads as the last of the plan: "[3/3]" after "plan: 1 run" was the bug
    assert not re.search(r"\[\d+/\d+\]", text), text
    assert all("7" in line for line in text.splitlines()[1:]), text
    plain = io.StringIO()
    Progress(2, out=plain).run_start(2, {}, 1)  # no search: the plain counter stays
    assert "[2/2]" in plain.getvalue()


def test_the_load_phase_says_when_it_starts_and_ends() -> None:
    out = io.StringIO()
    p = Progress(1, out=out)
    workload = TpcbWorkload(TpcbSettings.model_validate({"kind": "tpcb", "scale": 3}))
    p.load_start(1, workload)
    p.load_end(1, LoadResult(steps={"copy": 2.0, "index": 1.5}, rows={"pgbench_accounts": 300000}))
    p.load_end(2, LoadResult(reused=True))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert "tpcb" in lines[0] and "scale = 3" in lines[0], lines
    assert "3.5s" in lines[1] and "300,000" in lines[1], lines
    assert "3.5s" not in lines[2]


def _search_store(out: Path) -> None:
    store = Store.create(out, name="probes", spec_text=SEARCH, spec_path=str(out / "experiment.toml"), seed=1,
                         factors=["workload.rate"], host=host_facts())
    # the order a search runs them in: doubling, then bisecting back down
    for number, rate in enumerate((500, 1000, 2000, 1500, 700), start=1):
        store.add_plan([PlannedRun(number, number, 1, {"workload.rate": rate})])
        store.start_run(number, 0)
        result = RunResult()
        result.headline = ["tps", "latency_p99_ms"]
        result.add_metric("tps", float(rate), "tx/s", "", True)
        result.add_metric("latency_p99_ms", 1.0 if rate <= 1000 else 9.0, "ms", "", False)
        store.finish_run(number, result, status="done", seconds=1.0, target={"kind": "postgres"})
    store.close()


def test_show_and_the_report_list_probes_by_rate(workdir: Path, run_cli) -> None:
    out = workdir / "out"
    _search_store(out)
    shown = run_cli("show", out).stdout
    lines = shown.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["run", "workload.rate"])
    body = [line.split() for line in lines[header + 1:] if line.split() and line.split()[0].isdigit()]
    assert [float(cells[1]) for cells in body] == [500, 700, 1000, 1500, 2000], shown
    assert [int(cells[0]) for cells in body] == [1, 5, 2, 4, 3], shown  # the run order, kept as the run column
    store = Store.open(out, write=False)
    try:
        tables = [b for section in search.report_sections(store) for b in section.blocks if isinstance(b, Table)]
    finally:
        store.close()
    assert [row[1] for row in tables[0].rows] == [500, 700, 1000, 1500, 2000]
    assert [row[0] for row in tables[0].rows] == [1, 5, 2, 4, 3]
