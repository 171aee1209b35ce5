"""Each workload's headline table: one row per factor level, aggregated over
the repetitions, never one per run (issue 27, item 1).

Stores are written through the real Store API with made-up figures (as
tests/synthetic_store.py does) for the workloads whose runs are slow; the
report is the real one, and the tables are read back from its HTML.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np

from perflab.analysis import pivot
from perflab.host import host_facts
from perflab.model import QueryTime, RunResult, SeriesPoint
from perflab.plan import PlannedRun
from perflab.report import write_report
from perflab.store import Store


class Tables(HTMLParser):
    """Every <table> of a page: its caption, headers and rows of cell text."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict[str, Any]] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._caption: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self.tables.append({"caption": "", "headers": [], "rows": []})
        elif tag == "caption":
            self._caption = []
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "caption" and self._caption is not None:
            self.tables[-1]["caption"] = "".join(self._caption).strip()
            self._caption = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None and self.tables:
            key = "headers" if not self.tables[-1]["headers"] and not self.tables[-1]["rows"] else "rows"
            if key == "headers":
                self.tables[-1]["headers"] = self._row
            else:
                self.tables[-1]["rows"].append(self._row)
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif self._caption is not None:
            self._caption.append(data)


def tables_of(html: str) -> list[dict[str, Any]]:
    parser = Tables()
    parser.feed(html)
    return parser.tables


def table_with(html: str, caption_start: str) -> dict[str, Any]:
    found = [t for t in tables_of(html) if t["caption"].startswith(caption_start)]
    assert found, f"no table captioned {caption_start!r}: " + "; ".join(t["caption"] for t in tables_of(html))
    return found[0]


def make_store(out: Path, workload: str, factors: dict[str, list[Any]], repetitions: int,
               metrics: Callable[[dict[str, Any], int], dict[str, float]],
               series: Callable[[dict[str, Any], int], list[SeriesPoint]] | None = None,
               queries: Callable[[dict[str, Any], int], list[QueryTime]] | None = None,
               target: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> Path:
    spec = (f'[experiment]\nname = "t"\nrepetitions = {repetitions}\norder = "sequential"\nseed = 1\n\n'
            f'[target]\nkind = "postgres"\n\n[workload]\nkind = "{workload}"\n\n[factors]\n'
            + "\n".join(f'"{k}" = {json.dumps(v)}' for k, v in factors.items()) + "\n")
    store = Store.create(out, name="t", spec_text=spec, spec_path=str(out / "experiment.toml"), seed=1,
                         factors=list(factors), host=host_facts())
    combos = [dict(zip(factors, v, strict=True)) for v in itertools.product(*factors.values())]
    plan = [PlannedRun(number=i, combination=c, repetition=rep, factors=combo)
            for i, (c, rep, combo) in enumerate(((c, rep, combo) for c, combo in enumerate(combos, start=1)
                                                  for rep in range(1, repetitions + 1)), start=1)]
    store.add_plan(plan)
    for run in plan:
        store.start_run(run.number, 0)
        result = RunResult()
        figures = metrics(run.factors, run.repetition)
        result.headline = list(figures)[:2]
        for name, value in figures.items():
            result.add_metric(name, value, "", "", True)
        if series is not None:
            result.series += series(run.factors, run.repetition)
        if queries is not None:
            result.queries += queries(run.factors, run.repetition)
        store.finish_run(run.number, result, status="done", seconds=1.0,
                         target=target(run.factors) if target is not None else {"kind": "postgres"})
    store.close()
    return out


def report_html(out: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a layout warning is a bug
        return write_report(out).read_text()


RNG = np.random.default_rng(5)


def noisy(x: float) -> float:
    return float(x * RNG.normal(1.0, 0.02))


def test_cell_follows_the_sample_size_rules() -> None:
    assert pivot.cell([]) == "–"
    assert pivot.cell([5.0]) == "n=1: 5"
    assert pivot.cell([5.0, 6.0]) == "n=2: 5; 6"
    three = pivot.cell([100.0, 101.0, 99.0])
    assert three.startswith("100 [") and three.endswith("]")
    low, high = (float(v) for v in three[5:-1].split(", "))
    assert 90 < low < 100 < high < 110
    assert "too few runs" in pivot.cell([1.0, 100.0, 10_000.0])


def test_level_text_of_a_table_level() -> None:
    assert pivot.level_text({"data_fs": {"type": "ext4", "size": "1GB"}}) == "ext4 1GB"
    assert pivot.level_text({"label": "ext4 apart", "data_fs": {"type": "ext4"}}) == "ext4 apart"
    assert pivot.level_text(True) == "true"


def test_http_table_10_has_a_row_per_data_set(tmp_path: Path) -> None:
    factors = {"workload.fileset.size": ["0.5GB", "1.5GB"], "target.settings.sendfile": [True, False],
               "target.settings.worker_processes": [1, 2]}

    def metrics(f: dict[str, Any], rep: int) -> dict[str, float]:
        mbps = (900.0 if f["workload.fileset.size"] == "0.5GB" else 300.0) * (1.2 if f["target.settings.sendfile"]
                                                                           else 1.0)
        return {"throughput_mbps": noisy(mbps), "req_per_s": noisy(mbps * 20), "latency_p5_ms": noisy(0.2),
                "latency_p50_ms": noisy(1.0), "latency_p95_ms": noisy(5.0), "latency_mean_ms": noisy(1.5)}

    html = report_html(make_store(tmp_path, "http", factors, 3, metrics))
    mbps = table_with(html, "Mb/s per data set")
    assert [r[0] for r in mbps["rows"]] == ["0.5GB", "1.5GB"]  # a row per data set, not per run (24)
    assert len(mbps["headers"]) == 1 + 4  # a column per configuration
    assert mbps["headers"][1] == "sendfile=true, worker_processes=1"
    assert all(c.count("[") == 1 for r in mbps["rows"] for c in r[1:])  # 3 repetitions: an interval each
    # Table 10's response times: per data set, the profile as rows, a column per configuration
    for data_set in ("0.5GB", "1.5GB"):
        latency = table_with(html, f"Response time (ms) by server, data set {data_set}")
        assert [r[0] for r in latency["rows"]] == ["5%", "median", "95%", "mean"]
        assert latency["headers"][1:] == mbps["headers"][1:]


TPCB_REAL = """
[experiment]
name = "headline-tpcb"
repetitions = 2
[target]
kind = "postgres"
[target.settings]
shared_buffers = "32MB"
[workload]
kind = "tpcb"
scale = 1
transactions = 20
[factors]
"workload.clients" = [1, 2]
"workload.transactions" = [10, 30]
"""


def test_a_real_tpcb_run_has_its_table_per_level(run_cli: Any, workdir: Path) -> None:
    path = workdir / "tpcb.toml"
    path.write_text(TPCB_REAL)
    out = workdir / "out"
    run_cli("run", path, "--out", out, "--quiet", timeout=400)
    html = (out / "report.html").read_text()
    table = table_with(html, "TPC-B-like: TPS and latency per factor level")
    assert [r[:2] for r in table["rows"]] == [["1", "10"], ["1", "30"], ["2", "10"], ["2", "30"]]  # not 8 runs
    assert all(r[-1] == "2" and r[2].startswith("n=2: ") for r in table["rows"])
    assert (out / "figures" / "tpcb-tps-by-transactions.png").stat().st_size > 0


def test_tpcb_table_per_level_and_transactions_figure(tmp_path: Path) -> None:
    factors = {"workload.clients": [1, 2], "workload.transactions": [50, 100, 200]}

    def metrics(f: dict[str, Any], rep: int) -> dict[str, float]:
        return {"tps": noisy(100.0 * f["workload.clients"]), "latency_p50_ms": noisy(2.0),
                "latency_p99_ms": noisy(9.0)}

    html = report_html(make_store(tmp_path, "tpcb", factors, 2, metrics))
    table = table_with(html, "TPC-B-like: TPS and latency per factor level")
    assert table["headers"][:3] == ["clients", "transactions", "tps"]
    assert len(table["rows"]) == 6  # 2 x 3 levels, not 12 runs
    assert all(r[2].startswith("n=2: ") for r in table["rows"])  # 2 repetitions: the values, no interval
    assert 'id="fig-tpcb-tps-by-transactions"' in html


def test_tpcc_change_per_feature(tmp_path: Path) -> None:
    factors = {"target.settings.huge_pages": ["off", "on"], "target.settings.wal_sync_method": ["fdatasync",
                                                                                                  "open_datasync"]}

    def metrics(f: dict[str, Any], rep: int) -> dict[str, float]:
        tpmc = 1000.0 * (1.10 if f["target.settings.huge_pages"] == "on" else 1.0)
        return {"tpmC": noisy(tpmc), "nopm": noisy(tpmc * 0.99)}

    html = report_html(make_store(tmp_path, "tpcc", factors, 3, metrics))
    table = table_with(html, "TPC-C: tpmC and NOPM per factor level")
    assert len(table["rows"]) == 4  # 2 x 2 levels, not 12 runs
    changes = [r[0] for r in table_with(html, "TPC-C: change per feature")["rows"]]
    huge = next(c for c in changes if c.startswith("huge_pages: on vs off: tpmC +"))
    assert "[" in huge and "n 3/3" in huge


def test_tpch_per_level_and_vmstat_every_run_on_one_axis(tmp_path: Path) -> None:
    def series(f: dict[str, Any], rep: int) -> list[SeriesPoint]:
        return [SeriesPoint("vmstat", name, t, v) for t in (1.0, 2.0, 3.0)
                for name, v in (("us_pct", 40.0), ("sy_pct", 10.0), ("wa_pct", 5.0), ("st_pct", 0.0))]

    html = report_html(make_store(tmp_path, "tpch", {"target.settings.work_mem": ["4MB", "64MB"]}, 3,
                                  lambda f, rep: {"throughput_at_size": noisy(100.0), "power_at_size": noisy(90.0),
                                                 "qphh_at_size": noisy(95.0)},
                                  series))
    assert 'id="fig-vmstat-every-run"' in html
    table = table_with(html, "TPC-H: Power@Size, Throughput@Size and QphH@Size per factor level")
    assert [r[0] for r in table["rows"]] == ["4MB", "64MB"]  # a row per level, not 6 runs
    assert table["headers"] == ["work_mem", "Power@Size", "Throughput@Size", "QphH@Size", "n"]


def test_stream_loss_is_positive_and_pooling_is_said(tmp_path: Path) -> None:
    factors = {"target.rules.type": ["iptables", "nftables"], "target.rules.count": [0, 1000, 2000]}

    def metrics(f: dict[str, Any], rep: int) -> dict[str, float]:
        n = f["target.rules.count"]
        return {"goodput_mbps": noisy(1000.0 - 0.1 * n), "rules.count": float(n)}

    html = report_html(make_store(tmp_path, "stream", factors, 2, metrics, target=lambda f: {
        "kind": "router", "rules": {"type": f["target.rules.type"], "backend": "nft"}}))
    table = table_with(html, "Throughput lost per 1000 rules")
    assert len(table["rows"]) == 2  # a line per rule type, not per run
    lost = table["headers"].index("Mbit/s lost per 1000 rules")
    assert all(float(r[lost]) > 50 for r in table["rows"])  # a loss reads positive
    assert all("0-rule runs pooled" in r[2] for r in table["rows"])
    assert "Identical set-ups pooled" in html


def test_energy_per_query_set_and_resources(tmp_path: Path) -> None:
    factors = {"workload.queries": ["@tpch", "@ssb"], "target.resources.cpus": ["0", "0-1"]}

    def metrics(f: dict[str, Any], rep: int) -> dict[str, float]:
        j = 50.0 if f["target.resources.cpus"] == "0" else 70.0
        return {"energy.joules": noisy(j), "energy.queries.joules": noisy(j * 0.8),
                "energy.component.package.joules": noisy(j * 0.7), "energy.component.dram.joules": noisy(j * 0.1)}

    def queries(f: dict[str, Any], rep: int) -> list[QueryTime]:
        return [QueryTime(0, i, f"Q{i}", 0.1 * i, energy={"package": 1.5 * i, "dram": 0.5 * i},
                          energy_j=2.0 * i, energy_source="model") for i in (1, 2)]

    html = report_html(make_store(tmp_path, "sql", factors, 3, metrics, queries=queries))
    table = table_with(html, "Energy (J) per query set")
    assert table["headers"] == ["cpus", "component", "@tpch", "@ssb"]
    assert [r[:2] for r in table["rows"]] == [[c, k] for c in ("0", "0-1")
                                              for k in ("total", "in queries", "package", "dram")]
    assert all(c.count("[") == 1 for r in table["rows"] for c in r[2:])
    assert 'id="fig-energy-per-query-time"' in html


def test_syscalls_one_table_per_storage_layout(tmp_path: Path) -> None:
    together = {"data_fs": {"type": "ext4", "size": "1GB"}}
    apart = {"data_fs": {"type": "ext4", "size": "1GB"}, "wal_fs": {"type": "ext2", "size": "1GB"}}
    factors = {"target.storage": [together, apart], "workload.clients": [1, 2]}

    def metrics(f: dict[str, Any], rep: int) -> dict[str, float]:
        out = {"tps": noisy(100.0), "syscalls.mechanism_strace": 0.0}
        for cls, call, n in (("wal", "fdatasync", 200.0), ("base", "fsync", 20.0)):
            p = f"syscalls.{cls}.{call}"
            out |= {f"{p}.count": n * f["workload.clients"], f"{p}.mean_us": noisy(500.0), f"{p}.min_us": 80.0,
                    f"{p}.max_us": 9000.0, f"syscalls.{cls}.{call}": n, f"syscalls.{cls}.writes": 3 * n}
        return out

    def series(f: dict[str, Any], rep: int) -> list[SeriesPoint]:
        return [SeriesPoint("syscalls", "call.wal.fdatasync", 0.01 * i, noisy(500.0)) for i in range(50)]

    html = report_html(make_store(tmp_path, "tpcb", factors, 3, metrics, series))
    sync = table_with(html, "fsync and fdatasync per storage layout")
    assert sync["headers"] == ["call", "storage", "Num", "Avg (us)", "Min (us)", "Max (us)", "runs"]
    assert [r[:2] for r in sync["rows"]] == [["fsync()", "ext4 1GB"], ["fsync()", "ext4 1GB ext2 1GB"],
                                             ["fdatasync()", "ext4 1GB"], ["fdatasync()", "ext4 1GB ext2 1GB"]]
    # held at the first level of the other factor (clients=1): 3 runs a layout, not 12 rows of runs
    assert all(r[-1] == "3" for r in sync["rows"])
    assert sync["rows"][2][2].startswith("200 [")
    classes = table_with(html, "Calls per file class and storage layout")
    assert [r[:2] for r in classes["rows"]] == [["ext4 1GB", "wal"], ["ext4 1GB", "base"],
                                                ["ext4 1GB ext2 1GB", "wal"], ["ext4 1GB ext2 1GB", "base"]]
    assert html.count('id="fig-syscalls-successive') == html.count('id="fig-syscalls-successive"') >= 1
