"""A DBT-3 durability study SIGKILLed during run 3's refresh functions and
resumed, against an uninterrupted copy (issue 34): the same refresh pairs run
by run, and the degradation table of each.

    .venv/bin/python benchmarks/resume_equivalence.py [--repetitions 6] [--sf 0.01] [--streams 2] [--dir DIR]
        [--retry-failed]

With --retry-failed, a third copy: its server (not perflab) is SIGKILLed at
the same moment, so run 3 fails and the experiment goes on to its end; then
`perflab resume --retry-failed` runs run 3 again, on a fresh load (the data
was removed at the end). Its report's degradation table is printed before
the retry (run 3 missing, at its place) and after it (run 3 at repetition 3,
marked retried and fresh load).

Both copies run the same experiment file (tests = ["throughput"], maintenance
VACUUM ANALYZE between runs, seed fixed so both use the same refresh blocks).
The killed copy is SIGKILLed as soon as run 3's first RF1 has committed (its
orders are in the database), then `perflab show` and `perflab resume` run.
Prints the two degradation tables side by side, run by run: its repetition,
its refresh pairs, Throughput@Size and its change from the first run (as the
report's degradation table computes them, each run at its repetition number)
and its marks (resumed, retried, fresh load), then each copy's degradation
verdict, whether the refresh sequences, pairs and repetitions are equal, and
what the resumed copy's report says. The throughput figures are measurements
and differ between copies by the machine's noise; the pairs, rows and
repetition numbers must not. Each copy's degradation table is also printed
as its own report.html shows it (the report's per-run table, and the runs
cell of its summary row).
"""

from __future__ import annotations

import argparse
import html as html_mod
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from perflab import _engine
from perflab.analysis import degradation
from perflab.proc import cmdline
from perflab.store import Store
from perflab.targets.postgres.postmaster import PID_FILE, live_postmaster

EXPERIMENT = """
[experiment]
name = "dbt3-durability-resume"
repetitions = {reps}
order = "sequential"

[target]
kind = "postgres"

[workload]
kind = "tpch"
scale_factor = {sf}
tests = ["throughput"]
streams = {streams}
seed = 7
maintenance = "VACUUM ANALYZE"
query_timeout = "10min"

[collect]
vmstat = {{ interval = "1s" }}
"""


def perflab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perflab.cli", *args], capture_output=True, text=True)


def postmasters_under(directory: Path) -> list[int]:
    """Live postmasters whose data directory lies under `directory` (their postmaster.pid files)."""
    pids = [live_postmaster(pidfile.parent) for pidfile in directory.rglob(PID_FILE)]
    return [pid for pid in pids if pid is not None and "postgres" in cmdline(pid)]


def kill_in_run_3_refresh(f: Path, out: Path, sf: float, streams: int, victim: str = "perflab") -> None:
    """As soon as run 3's first RF1 has committed: SIGKILL perflab
    (victim "perflab"), or its server (victim "server": run 3 fails, and
    perflab goes on to the end of the experiment, which it makes no report of)."""
    orders, _, _, _ = _engine.tpch_rf1_rows(sf, 2 * streams + 1, 7)
    keys = [int(line.split(b"|")[0]) for line in orders.splitlines()]
    with (out.parent / f"{out.name}.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "perflab.cli", "run", f, "--out", out, "--quiet",
                                 "--no-report"], stdout=log, stderr=subprocess.STDOUT)
    pg = None
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"perflab exited {proc.returncode} before run 3's refresh")
            try:
                if pg is None and (out / "perflab.sqlite").is_file():
                    # read only: a connection that made the file first would leave perflab a store it cannot read
                    row = sqlite3.connect(f"file:{out / 'perflab.sqlite'}?mode=ro", uri=True).execute(
                        "SELECT target_json FROM run WHERE id = 1").fetchone()
                    if row and row[0]:
                        pg = psycopg.connect(json.loads(row[0])["endpoint"], autocommit=True)
                if pg is not None and pg.execute("SELECT count(*) FROM orders WHERE o_orderkey = any(%s)",
                                                 (keys,)).fetchone()[0]:
                    break
            except (sqlite3.Error, psycopg.Error):
                pass
            time.sleep(0.02)
        if victim == "server":
            for pid in postmasters_under(out):
                os.kill(pid, signal.SIGKILL)
            if proc.wait() != 1:
                raise SystemExit(f"perflab exited {proc.returncode}, not 1 (a failed run), after its server was killed")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        if pg is not None:
            pg.close()


@dataclass
class Copy:
    """One copy's per-run data, as its store holds it and its report shows it."""

    runs: list[dict[str, Any]]
    values: dict[int, float]  # Throughput@Size of the runs that have one
    change: dict[int, float]  # change from the first run, as the degradation table shows it
    pairs: dict[int, list[int]]  # refresh pairs per run
    marks: dict[int, list[str]]
    sequence: list[tuple[int, str]]  # every refresh function, run by run: (run, "RF1 pair 5: inserted ...")
    verdict: str


def read_copy(out: Path) -> Copy:
    """The degradation table as the report computes it (each run at its
    repetition number: Builder.degradation), and the refresh pairs per run."""
    store = Store.open(out)
    runs = store.runs()
    values = {m["run_id"]: m["value"] for m in store.metrics() if m["name"] == "throughput_at_size"}
    pairs: dict[int, list[int]] = {}
    sequence = []
    for q in store.queries():
        if q["query"] in ("RF1", "RF2"):
            sequence.append((q["run_id"], q["text"]))
            pair = int(q["text"].split()[2].rstrip(":"))
            if pair not in pairs.setdefault(q["run_id"], []):
                pairs[q["run_id"]].append(pair)
    done = [r for r in runs if r["id"] in values and r["status"] == "done"]
    assessed = degradation.assess([values[r["id"]] for r in done], True, positions=[r["repetition"] for r in done])
    copy = Copy(runs, values, dict(zip([r["id"] for r in done], assessed.change_pct, strict=True)), pairs,
                store.run_marks(), sequence, assessed.verdict)
    store.close()
    return copy


def side_by_side(plain: Copy, killed: Copy, other: str = "resumed") -> str:
    lines = [f"| run | rep | refresh pairs: uninterrupted | refresh pairs: {other} | Throughput@Size: uninterrupted "
             f"| change from first | Throughput@Size: {other} | change from first | note: uninterrupted "
             f"| note: {other} |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def cells(c: Copy, run: dict[str, Any]) -> tuple[str, str, str]:
        v = c.values.get(run["id"])
        if v is None or run["id"] not in c.change:
            return "–", "–", ", ".join([run["status"], *c.marks.get(run["id"], [])])
        return f"{v:,.0f}", f"{c.change[run['id']]:+.2f}%", ", ".join(c.marks.get(run["id"], []))

    by_id = {r["id"]: r for r in killed.runs}
    for r in plain.runs:
        k = by_id[r["id"]]
        (pv, pc, pn), (kv, kc, kn) = cells(plain, r), cells(killed, k)
        rep = str(r["repetition"]) if r["repetition"] == k["repetition"] else f"{r['repetition']} / {k['repetition']}"
        lines.append(f"| #{r['id']} | {rep} | {', '.join(map(str, plain.pairs.get(r['id'], []))) or '–'} | "
                     f"{', '.join(map(str, killed.pairs.get(r['id'], []))) or '–'} | {pv} | {pc} | {kv} | {kc} | "
                     f"{pn} | {kn} |")
    lines.append("")
    lines.append(f"verdict, uninterrupted: {plain.verdict}")
    lines.append(f"verdict, {other}:{' ' * (14 - len(other))}{killed.verdict}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repetitions", type=int, default=6)
    p.add_argument("--sf", type=float, default=0.01)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--dir", type=Path)
    p.add_argument("--retry-failed", action="store_true",
                   help="a third copy: run 3's server killed, then `resume --retry-failed`")
    a = p.parse_args()
    root = a.dir or Path(tempfile.mkdtemp(prefix="perflab-resume-"))
    root.mkdir(parents=True, exist_ok=True)
    f = root / "dbt3.toml"
    f.write_text(EXPERIMENT.format(reps=a.repetitions, sf=a.sf, streams=a.streams))
    plain, killed = root / "uninterrupted", root / "killed"
    done = perflab("run", str(f), "--out", str(plain), "--quiet")
    if done.returncode != 0:
        raise SystemExit(done.stdout + done.stderr)
    kill_in_run_3_refresh(f, killed, a.sf, a.streams)
    time.sleep(6)  # the guardian stops the server the killed perflab left
    print("## perflab show after the SIGKILL\n\n```\n" + perflab("show", str(killed)).stdout + "```\n")
    resumed = perflab("resume", str(killed), "--quiet")
    if resumed.returncode != 0:
        raise SystemExit(resumed.stdout + resumed.stderr)
    c_plain, c_killed = read_copy(plain), read_copy(killed)
    print(f"## uninterrupted ({plain}) and killed in run 3's refresh functions, then resumed ({killed})\n")
    print(side_by_side(c_plain, c_killed) + "\n")
    same_reps = [(r["id"], r["repetition"]) for r in c_plain.runs] == [(r["id"], r["repetition"]) for r in c_killed.runs]
    print(f"refresh sequences (pair, rows, run by run) equal: {c_plain.sequence == c_killed.sequence} "
          f"({len(c_plain.sequence)} functions); refresh pairs per run equal: {c_plain.pairs == c_killed.pairs}; "
          f"runs and repetition numbers equal: {same_reps}; every run done in both: "
          f"{all(r['status'] == 'done' for r in c_plain.runs + c_killed.runs)}")
    html = (killed / "report.html").read_text()
    history = html[html.find("Experiment history"):]
    print(f"the resumed copy's report: an Experiment history section: {'Experiment history' in html}; "
          f"the killed session in it: {'killed' in history}; run 3 marked resumed: {'resumed' in html}\n")
    plain_table, killed_table = report_table(plain / "report.html"), report_table(killed / "report.html")
    print("### the uninterrupted copy's report: degradation\n\n" + plain_table.markdown() + "\n")
    print("### the resumed copy's report: degradation\n\n" + killed_table.markdown() + "\n")
    print(agreement(plain_table, killed_table) + "\n")
    if a.retry_failed:
        retry(f, root / "retried", a, c_plain, plain_table)


def retry(f: Path, out: Path, a: argparse.Namespace, c_plain: Copy, plain_table: ReportTable) -> None:
    """The third copy: its server killed in run 3's refresh functions, the
    experiment finished, then `resume --retry-failed`."""
    kill_in_run_3_refresh(f, out, a.sf, a.streams, victim="server")
    made = perflab("report", str(out))
    if made.returncode != 0:
        raise SystemExit(made.stdout + made.stderr)
    shutil.copy(out / "report.html", out / "report-before-retry.html")
    before = report_table(out / "report-before-retry.html")
    retried = perflab("resume", str(out), "--retry-failed", "--quiet")
    if retried.returncode != 0:
        raise SystemExit(retried.stdout + retried.stderr)
    c_retried = read_copy(out)
    after = report_table(out / "report.html")
    print(f"## uninterrupted and with run 3's server killed, then `resume --retry-failed` ({out})\n")
    print(side_by_side(c_plain, c_retried, "retried") + "\n")
    same_reps = [(r["id"], r["repetition"]) for r in c_plain.runs] == [(r["id"], r["repetition"]) for r in c_retried.runs]
    print(f"refresh pairs per run equal: {c_plain.pairs == c_retried.pairs}; refresh sequences (pair, rows) equal: "
          f"{c_plain.sequence == c_retried.sequence}; runs and repetition numbers equal: {same_reps}; every run done: "
          f"{all(r['status'] == 'done' for r in c_retried.runs)}\n")
    print("### its report before the retry: degradation\n\n" + before.markdown() + "\n")
    print("### its report after the retry: degradation\n\n" + after.markdown() + "\n")
    print(agreement(plain_table, after))


def agreement(plain: ReportTable, other: ReportTable) -> str:
    return ("the reports' degradation tables, the measured figures aside: the same runs, repetitions and runs "
            f"with a value: {plain.shape(marks=False) == other.shape(marks=False)}; the same notes too: "
            f"{plain.shape() == other.shape()} (notes of the uninterrupted copy: "
            f"{[r[4] for r in plain.rows if r[4]] or 'none'}; of the other: {[r[4] for r in other.rows if r[4]] or 'none'})")


@dataclass
class ReportTable:
    """A report's degradation section as it shows it: the runs cell of the
    summary's row and the per-run table (run, repetition, value, change, note)."""

    title: str
    runs_cell: str
    header: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = [f"{self.title}; summary's runs cell: {self.runs_cell}", "",
                 "| " + " | ".join(self.header) + " |", "|" + " --- |" * len(self.header)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def shape(self, marks: bool = True) -> list[tuple[str, ...]]:
        """What must not differ between copies: run, repetition, whether it
        has a value, and (with `marks`) its note."""
        return [(r[0], r[1], "–" if r[2] == "–" else "value", *([r[4]] if marks else [])) for r in self.rows]


def _cells(row: str) -> list[str]:
    return [" ".join(html_mod.unescape(re.sub(r"<[^>]+>", " ", c)).split())
            for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]


def report_table(path: Path) -> ReportTable:
    """The degradation section of a report.html: its summary's first row's
    runs cell, and the first per-run table (the OSDL-style one)."""
    text = path.read_text()
    section = text[text.find('id="degradation"'):]
    summary = section[:section.find("</table>")]
    first = re.findall(r"<tr[^>]*>(.*?)</tr>", summary[summary.find("<tbody>"):], re.S)
    runs_cell = _cells(first[0])[3] if first else "(no summary)"
    h3 = section.find("<h3>")
    if h3 < 0:
        return ReportTable("(no per-run degradation table)", runs_cell, [], [])
    title = " ".join(html_mod.unescape(re.sub(r"<[^>]+>", " ", section[h3:section.find("</h3>", h3)])).split())
    body = section[h3:section.find("</table>", h3)]
    rows = [_cells(r) for r in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]
    return ReportTable(title, runs_cell, rows[0], rows[1:])


if __name__ == "__main__":
    main()
