"""`perflab serve`: the read-only live view of an experiment (issue 48).

The server runs as the user runs it, `perflab serve DIR --port 0`, its URL on
stdout's first line; its numbers are checked against the report's and the
store's, its refusals (404, 400, no file outside DIR), its `/metrics` with a
Prometheus text-format parser, and its page in headless Chromium while a
real run writes the store.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest

from chromium import Chromium, find_chromium
from conftest import cli_command
from perflab.plan import PlannedRun
from perflab.report.html import esc, fmt_pct
from perflab.serve.openmetrics import render
from perflab.serve.views import decimate
from perflab.store import Store
from synthetic_store import build_store

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
# a real experiment that runs in seconds: SQL on a DuckDB file perflab creates, the default collectors on
EXPERIMENT = ('[experiment]\nname = "{name}"\nrepetitions = {repetitions}\n[target]\nkind = "duckdb"\n'
              '[workload]\nkind = "sql"\nstatements = ["SELECT 1"]\nduration = "{duration}"\n')

# ----------------------------------------------------------------- decimation


def test_decimation_keeps_every_local_maximum_above_a_threshold() -> None:
    """A three-day series of 1-s samples to 500 buckets: each one-second spike
    above the threshold is its bucket's max, at most 500 buckets come back,
    and every value lies within its bucket's [min, max]."""
    rng = np.random.default_rng(3)
    n = 3 * 86400
    t = np.arange(n, dtype=float)
    v = 1000.0 + rng.normal(0.0, 20.0, n)
    # 40 spikes, one per 1/40 of the series (a bucket is 1/500): no two share a bucket
    spikes = np.arange(40) * (n // 40) + rng.integers(0, n // 80, 40)
    v[spikes] = 1000.0 + rng.uniform(200.0, 900.0, len(spikes))
    v[spikes[:5]] = 10.0  # dips too: a stall is a spike downwards
    threshold = 1150.0
    local_max = [i for i in range(1, n - 1) if v[i] > threshold and v[i] >= v[i - 1] and v[i] >= v[i + 1]]
    assert len(local_max) >= 30
    buckets = decimate(np.column_stack([t, v]), 500)
    assert len(buckets) <= 500
    starts = [b[0] for b in buckets]
    for i in local_max:
        k = int(np.searchsorted(starts, t[i], side="right")) - 1
        assert buckets[k][2] == v[i], (i, v[i], buckets[k])
    for i in spikes[:5]:
        k = int(np.searchsorted(starts, t[i], side="right")) - 1
        assert buckets[k][1] == 10.0
    # every value within its bucket's envelope, the mean inside it
    index = np.searchsorted(starts, t, side="right") - 1
    lo = np.array([b[1] for b in buckets])[index]
    hi = np.array([b[2] for b in buckets])[index]
    assert (v >= lo).all() and (v <= hi).all()
    assert all(b[1] <= b[3] <= b[2] for b in buckets)


def test_decimation_of_short_series_gaps_and_none() -> None:
    rows = [(1.0, 5.0), (2.0, None), (3.0, 7.0)]
    assert [b[:3] for b in decimate(rows, 10)][0] == (1.0, 5.0, 5.0)
    assert math.isnan(decimate(rows, 10)[1][1])  # a second with nothing measured stays a gap
    # a bucket of missing values only is a gap; None counts in no figure
    long = [(float(i), None if 10 <= i < 20 else float(i % 7)) for i in range(100)]
    out = decimate(long, 10)
    assert len(out) == 10 and math.isnan(out[1][3])
    assert out[0][1:] == (0.0, 6.0, pytest.approx(np.mean([i % 7 for i in range(10)])))
    assert decimate([], 5) == []
    with pytest.raises(ValueError):
        decimate(rows, 0)


# ----------------------------------------------------------------- the server


class Served:
    """`perflab serve DIR` as a user starts it, stopped on leaving."""

    def __init__(self, out: Path, *args: str) -> None:
        self.proc = subprocess.Popen(cli_command("serve", out, "--port", "0", *args), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line:
            self.proc.wait(timeout=30)
            raise AssertionError(f"serve printed no URL: {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.url = line
        parts = urlsplit(line)
        self.host, self.port, self.base = parts.hostname, parts.port, parts.path.rstrip("/")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
        """GET the raw `path` (sent as given, no normalising) under the base."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request("GET", self.base + path, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read(), r.getheader("Content-Type", "")
        finally:
            conn.close()

    def json(self, path: str) -> Any:
        status, body, kind = self.get(path)
        assert status == 200 and kind.startswith("application/json"), (path, status, body[:300])
        return json.loads(body)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()

    def __enter__(self) -> Served:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture(scope="module")
def real_store() -> Iterator[Path]:
    """A real experiment: two short runs of SQL on a DuckDB perflab creates, collectors on, and its report."""
    d = Path(tempfile.mkdtemp(prefix="perflab-serve-", dir="/tmp"))
    d.chmod(0o755)
    f = d / "e.toml"
    f.write_text(EXPERIMENT.format(name="real-one", repetitions=2, duration="2s"))
    out = d / "out"
    subprocess.run(cli_command("run", f, "--out", out, "--quiet"), check=True, capture_output=True, timeout=240)
    yield out
    shutil.rmtree(d, ignore_errors=True)


def _embedded(html: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="perflab-data">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


@pytest.mark.slow
def test_the_served_numbers_are_the_reports_and_the_stores(real_store: Path) -> None:
    report = _embedded((real_store / "report.html").read_text())
    store = Store.open(real_store, write=False)
    try:
        with Served(real_store) as served:
            state = served.json("/api/state")
            assert state["experiment"]["name"] == "real-one"
            assert state["counts"] == {"planned": 0, "running": 0, "done": 2, "failed": 0}
            assert state["writing"] is False and state["current"] in (1, 2)
            assert [(r["id"], r["status"], r["metrics"]) for r in state["runs"]] == \
                [(r["id"], r["status"], r["metrics"]) for r in report["runs"]]
            assert state["headline"] == report["headline"]
            for run in (1, 2):
                served_series = served.json(f"/api/series?run={run}&points=50")["series"]
                stored: dict[str, list[tuple[float, float | None]]] = {}
                for row in store.series(run):
                    stored.setdefault(f"{row['source']}.{row['name']}", []).append((row["t"], row["value"]))
                assert set(served_series) == set(stored)
                assert "vmstat.us_pct" in served_series and "vmstat.free_kib" in served_series
                for key, rows in stored.items():
                    s = served_series[key]
                    assert s["samples"] == len(rows)
                    assert s["last"] == [rows[-1][0], rows[-1][1]]
                    values = [v for _, v in rows if v is not None]
                    if values:
                        assert max(x for x in s["max"] if x is not None) == max(values)
                        assert min(x for x in s["min"] if x is not None) == min(values)
                    if len(rows) <= 50:
                        assert s["t"] == [t for t, _ in rows]
    finally:
        store.close()


@pytest.mark.slow
def test_bad_paths_are_404_bad_parameters_400_and_no_file_outside_dir_is_served(real_store: Path,
                                                                                  tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(real_store, out, symlinks=True)
    figures = sorted((out / "figures").glob("*.svg"))
    assert figures
    (out / "figures" / "leak.svg").symlink_to(out / "perflab.sqlite")
    (tmp_path / "secret.svg").write_text("<svg>secret</svg>")
    (out / "figures" / "outside.svg").symlink_to(tmp_path / "secret.svg")
    with Served(out) as served:
        for path in ("/nope", "/api", "/api/state/x", "/../perflab.sqlite", "/%2e%2e/perflab.sqlite",
                     "/perflab.sqlite", "/figures/../perflab.sqlite", "/figures/%2e%2e%2fperflab.sqlite",
                     "/figures/..%2fperflab.sqlite", "/report.html/../perflab.sqlite", "//etc/passwd",
                     "/figures/leak.svg", "/figures/outside.svg", "/figures/", "/figures/.hidden.svg",
                     "/api/series?run=999", "/e.toml", "/figures/x.txt"):
            status, body, _ = served.get(path)
            assert status == 404, (path, status)
            assert b"SQLite format" not in body and b"secret" not in body
        for path in ("/api/series", "/api/series?run=x", "/api/series?run=1&points=1",
                     "/api/series?run=1&points=99999999", "/api/series?run=1&run=2", "/api/events?after=-1",
                     "/api/series?run=1.5", "/api/series?run=1&window=0"):
            status, body, _ = served.get(path)
            assert status == 400, (path, status)
            assert "error" in json.loads(body)
        # a page elsewhere that rebinds its name to 127.0.0.1 gets nothing
        assert served.get("/api/state", {"Host": "evil.example:80"})[0] == 404
        conn = http.client.HTTPConnection(served.host, served.port, timeout=60)
        conn.request("POST", "/api/state", body=b"{}")
        assert conn.getresponse().status == 405
        conn.close()
        # what may be served is: the report and its figures
        status, body, kind = served.get("/report.html")
        assert status == 200 and kind.startswith("text/html") and b"perflab-data" in body
        status, body, kind = served.get(f"/figures/{figures[0].name}")
        assert status == 200 and kind == "image/svg+xml" and body == figures[0].read_bytes()


def _parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Families -> (labels, value): prometheus_client's parser where installed, else a strict hand check."""
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        text_string_to_metric_families = None
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    if text_string_to_metric_families is not None:
        for family in text_string_to_metric_families(text):
            out[family.name] = [(dict(s.labels), s.value) for s in family.samples]
        return out
    sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\} '
                        r"(NaN|[+-]Inf|-?[0-9.e+-]+)$")
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* \S", line), line
            continue
        m = sample.match(line)
        assert m, line
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2))}
        out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


@pytest.mark.slow
def test_metrics_parse_as_prometheus_text(real_store: Path) -> None:
    store = Store.open(real_store, write=False)
    try:
        with Served(real_store) as served:
            status, body, kind = served.get("/metrics")
            current = served.json("/api/state")["current"]
    finally:
        last: dict[tuple[str, str], float] = {}
        for row in store.series(current):
            last[(row["source"], row["name"])] = row["value"]
        figures = {m["name"]: m["value"] for m in store.metrics(current) if m["value"] is not None}
        store.close()
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    families = _parse_metrics(body.decode())
    runs = {labels["state"]: value for labels, value in families["perflab_runs"]}
    assert runs == {"planned": 0, "running": 0, "done": 2, "failed": 0}
    assert families["perflab_current_run"] == [({"experiment": "real-one"}, float(current))]
    series = {(labels["source"], labels["series"]): (labels, value) for labels, value in families["perflab_run_series"]}
    assert set(series) == set(last)
    labels, value = series[("vmstat", "us_pct")]
    assert labels["experiment"] == "real-one" and labels["run"] == str(current)
    assert value == last[("vmstat", "us_pct")]
    assert {labels["metric"]: value for labels, value in families["perflab_run_metric"]} == figures


def test_label_values_are_escaped(tmp_path: Path) -> None:
    """An experiment name and a factor level with a quote, a backslash and a
    newline reach Prometheus as they are."""
    from perflab.report.data import load

    out = build_store(tmp_path / "out", clients=[1], sync=['on "a"\\b\nc'], repetitions=1, histograms=False,
                      name='x"y\\z')
    store = Store.open(out, write=False)
    try:
        d = load(store)
        text = render(d, 1, {("sql", "tps"): (1.0, 5.0), ("sql", "latency_p99_ms"): (1.0, None)})
    finally:
        store.close()
    families = _parse_metrics(text)
    (labels, value), *_ = [s for s in families["perflab_run_series"] if s[0]["series"] == "tps"]
    assert labels["experiment"] == 'x"y\\z'
    assert labels["target_settings_synchronous_commit"] == 'on "a"\\b\nc'
    assert labels["workload_clients"] == "1" and value == 5.0
    assert math.isnan([v for labels, v in families["perflab_run_series"] if labels["series"] == "latency_p99_ms"][0])


def test_the_degradation_table_so_far_is_the_reports(tmp_path: Path) -> None:
    from perflab.report import write_report

    out = build_store(tmp_path / "out", clients=[2], sync=["on", "off"], repetitions=6, degrade_pct_per_run=3.0,
                      fail_runs=(3,), histograms=False)
    html = write_report(out).read_text()
    with Served(out) as served:
        rows = served.json("/api/state")["degradation"]
    assert {(r["combination"], r["metric"]) for r in rows} == {(c, m) for c in (1, 2)
                                                                 for m in ("tps", "latency_mean_ms")}
    for r in rows:
        assert 3 not in r["runs"]  # the failed run has no value
        assert esc(r["verdict"]) in html
        assert f">{fmt_pct(r['change_pct'][-1])}<" in html


def test_a_store_gaining_rows_is_read_as_it_grows(tmp_path: Path) -> None:
    """A run in flight written through the store's own writer: every poll
    sees every row so far, and the writer is never refused (no lock taken)."""
    out, store = _running_store(tmp_path)
    try:
        writer = store.series_writer(1)
        with Served(out) as served:
            assert served.json("/api/state")["counts"]["running"] == 1
            seen = []
            for second in range(1, 31):
                writer.add("tpcb", "tps", float(second), 100.0 + second)
                writer.add("tpcb", "latency_p99_ms", float(second), None if second == 7 else 2.0)
                if second % 10 == 0:
                    writer._flush()
                    s = served.json("/api/series?run=1&points=20")["series"]
                    seen.append(s["tpcb.tps"]["samples"])
                    assert s["tpcb.tps"]["last"] == [float(second), 100.0 + second]
                    assert max(s["tpcb.tps"]["max"]) == 100.0 + second
            assert seen == [10, 20, 30]
            # the rate within the run, per window (here 10 s), with its trend (analysis.degradation.within_run)
            windows = served.json("/api/series?run=1&points=20&window=10")["series"]["tpcb.tps"]["windows"]
            assert windows["means"] == [105.5, 115.5, 125.5] and windows["starts"] == [1.0, 11.0, 21.0]
            assert windows["verdict"].startswith("changes within the run")  # no figure says which way is worse
            assert "windows" not in served.json("/api/series?run=1")["series"].get("vmstat.us_pct", {})
            store.add_event(1, kind="stall", message='a "quoted" <b>event</b>')
            events = served.json("/api/events?after=0")["events"]
            assert [e["kind"] for e in events][-1] == "stall"
            last = events[-1]["id"]
            assert served.json(f"/api/events?after={last}")["events"] == []
        writer.close()
    finally:
        store.close()


def test_a_query_runs_progress_is_its_live_figure(tmp_path: Path) -> None:
    """A TPC-H throughput run has no per-second rate: what each stream has
    completed, stored as each query completes, is what the page shows live."""
    from perflab.model import QueryTime

    out, store = _running_store(tmp_path)
    try:
        writer = store.series_writer(1)
        with Served(out) as served:
            assert served.json("/api/series?run=1")["queries"] is None
            for seq, (stream, query, seconds, status) in enumerate(
                    [(1, "Q14", 2.5, "ok"), (2, "Q2", 1.0, "ok"), (1, "Q2", 0.5, "ok"), (2, "Q9", None, "timeout")]):
                writer.add_query(QueryTime(stream, seq, query, seconds, status, started_s=float(seq)))
            writer._flush()
            q = served.json("/api/series?run=1")["queries"]
            assert (q["done"], q["failed"]) == (4, 1)
            assert [(x["stream"], x["done"], x["failed"], x["seconds"]) for x in q["streams"]] == [
                (1, 2, 0, 3.0), (2, 2, 1, 1.0)]
            assert [(x["query"], x["status"]) for x in q["latest"]][:2] == [("Q9", "timeout"), ("Q2", "ok")]
        writer.close()
    finally:
        store.close()


def test_the_reports_reading_is_built_again_when_a_run_ends_not_every_second(tmp_path: Path) -> None:
    """A running run's samples leave the report's reading of the store as it
    was (a poll during a long run must not read every run again: serve's CPU
    grew with the number of runs); a figure, a finished run or a new attempt
    changes it."""
    from perflab.serve.views import StoreView

    out, store = _running_store(tmp_path)
    try:
        view = StoreView(out)
        writer = store.series_writer(1)
        with view.connect() as reader:
            before = view.signature(reader)
        for second in range(1, 50):
            writer.add("tpcb", "tps", float(second), 100.0)
        writer._flush()
        with view.connect() as reader:
            assert view.signature(reader) == before
        store.add_event(1, kind="stall", message="x")
        with view.connect() as reader:
            assert view.signature(reader) == before
        store.interrupt_run(1)
        with view.connect() as reader:
            after = view.signature(reader)
        assert after != before
        writer.close()
    finally:
        store.close()


def _running_store(tmp_path: Path) -> tuple[Path, Store]:
    """A store with a plan of two runs, the first running, open for writing as a runner holds it."""
    out = tmp_path / "out"
    store = Store.create(out, name="growing", spec_text='[experiment]\nname = "growing"\n', spec_path=None, seed=1,
                         factors=["workload.clients"], host={})
    store.add_plan([PlannedRun(number=i, combination=i, repetition=1, factors={"workload.clients": c})
                    for i, c in ((1, 4), (2, 8))])
    store.start_run(1, time.monotonic_ns())
    return out, store


def test_serve_refuses_what_is_no_experiment_with_exit_2(tmp_path: Path, run_cli) -> None:
    proc = run_cli("serve", tmp_path, check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "perflab.sqlite" in proc.stderr
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, histograms=False)
    proc = run_cli("serve", out, "--port", "70000", check=False)
    assert proc.returncode == 2 and "--port" in proc.stderr and "Traceback" not in proc.stderr


def test_another_address_needs_the_token(tmp_path: Path) -> None:
    """--bind (here another loopback address: nothing leaves the machine) puts a token in every path."""
    out = build_store(tmp_path / "out", clients=[1], sync=["on"], repetitions=1, histograms=False)
    with Served(out, "--bind", "127.0.0.2") as served:
        assert served.host == "127.0.0.2" and len(served.base) > 20
        assert served.json("/api/state")["counts"]["done"] == 1
        token = served.base
        served.base = ""
        for path in ("/api/state", "/metrics", "/", f"{token}x/api/state", f"{token[:-1]}/api/state"):
            assert served.get(path)[0] == 404, path
        assert served.get(f"{token}/metrics")[0] == 200


# ----------------------------------------------------------------- the page in a browser

CHROMIUM = find_chromium()


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_page_updates_while_a_real_run_writes_the_store(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    tmp_path.chmod(0o755)
    f = tmp_path / "e.toml"
    f.write_text(EXPERIMENT.format(name="live", repetitions=2, duration="6s"))
    out = tmp_path / "out"
    run = subprocess.Popen(cli_command("run", f, "--out", out, "--quiet"), stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: _planned(out), "the run to write its plan", run)
        with Served(out) as served, Chromium(CHROMIUM, width=1280, height=1600) as browser:
            page = browser.load(served.url)
            assert page.problems == []
            own = f"http://{served.host}:{served.port}/"
            assert page.requests and [u for u in page.external_requests() if not u.startswith(own)] == []
            updates = lambda: int(browser.evaluate("document.documentElement.dataset.updates") or 0)  # noqa: E731
            samples = lambda: int(browser.evaluate("document.documentElement.dataset.samples || 0"))  # noqa: E731
            _wait(lambda: samples() > 0 and "running" in browser.evaluate("document.getElementById('live-title')"
                                                                            ".textContent"),
                  "the page to show a running run's figures", run)
            first = (samples(), browser.evaluate("document.documentElement.dataset.run"))
            _wait(lambda: (samples(), browser.evaluate("document.documentElement.dataset.run")) != first
                  and samples() > 0, "the page to show more rows", run)
            assert run.wait(timeout=240) == 0, run.stderr.read() if run.stderr else ""
            seen = updates()
            _wait(lambda: updates() > seen + 1, "the page to poll the finished store", run)
            # the finished store: the plan's figures are the report's, to the digit shown
            report = _embedded((out / "report.html").read_text())
            cells = browser.evaluate("Array.from(document.querySelectorAll('#runs tbody tr'))"
                                     ".map(tr => [tr.dataset.run, tr.children[3].textContent, tr.children[5].textContent])")
            assert [c[0] for c in cells] == ["1", "2"] and all("done" in c[1] for c in cells)
            first = report["headline"][0]
            for (run_id, _, shown), r in zip(cells, report["runs"], strict=True):
                assert int(run_id) == r["id"]
                assert float(shown.replace(",", "")) == pytest.approx(r["metrics"][first], rel=5e-3)
            assert browser.evaluate("document.querySelectorAll('#os-figs svg').length") == 3
            assert browser.evaluate("document.querySelectorAll('#os-figs polygon.envelope').length") >= 9
            assert browser.evaluate("document.querySelectorAll('#event-table tbody tr').length") >= 1
            thrown = [e for e in browser.events if e.get("method") == "Runtime.exceptionThrown"]
            assert thrown == []
            browser.screenshot(ARTIFACTS / "serve-page.png", full_page=True)
    finally:
        if run.poll() is None:
            run.terminate()
            run.wait(timeout=120)
        if run.stderr:
            run.stderr.close()


def _planned(out: Path) -> bool:
    import sqlite3

    path = out / "perflab.sqlite"
    if not path.is_file():
        return False
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return bool(conn.execute("SELECT count(*) FROM run").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def _wait(ready: Any, what: str, proc: subprocess.Popen[str], timeout_s: float = 180.0) -> None:
    """Until `ready()`: a bound that only tells a hang from progress on a busy machine."""
    end = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() not in (None, 0):
            raise AssertionError(f"perflab run failed before {what}: {proc.stderr.read() if proc.stderr else ''}")
        if time.monotonic() > end:
            raise AssertionError(f"waited {timeout_s:.0f}s for {what}")
        time.sleep(0.2)

