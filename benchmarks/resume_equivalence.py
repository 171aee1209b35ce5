"""A DBT-3 durability study SIGKILLed during run 3's refresh functions and
resumed, against an uninterrupted copy (issue 34): the same refresh pairs run
by run, and the degradation table of each.

    .venv/bin/python benchmarks/resume_equivalence.py [--repetitions 6] [--sf 0.01] [--streams 2] [--dir DIR]

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
repetition numbers must not.
"""

from __future__ import annotations

import argparse
import json
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
from perflab.store import Store

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


def kill_in_run_3_refresh(f: Path, out: Path, sf: float, streams: int) -> None:
    orders, _, _, _ = _engine.tpch_rf1_rows(sf, 2 * streams + 1, 7)
    keys = [int(line.split(b"|")[0]) for line in orders.splitlines()]
    with (out.parent / "killed.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "perflab.cli", "run", f, "--out", out, "--quiet",
                                 "--no-report"], stdout=log, stderr=subprocess.STDOUT)
    pg = None
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"perflab exited {proc.returncode} before run 3's refresh")
            try:
                if pg is None:
                    row = sqlite3.connect(out / "perflab.sqlite").execute(
                        "SELECT target_json FROM run WHERE id = 1").fetchone()
                    if row and row[0]:
                        pg = psycopg.connect(json.loads(row[0])["endpoint"], autocommit=True)
                if pg is not None and pg.execute("SELECT count(*) FROM orders WHERE o_orderkey = any(%s)",
                                                 (keys,)).fetchone()[0]:
                    break
            except (sqlite3.Error, psycopg.Error):
                pass
            time.sleep(0.02)
    finally:
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


def side_by_side(plain: Copy, killed: Copy) -> str:
    lines = ["| run | rep | refresh pairs: uninterrupted | refresh pairs: resumed | Throughput@Size: uninterrupted "
             "| change from first | Throughput@Size: resumed | change from first | note: uninterrupted "
             "| note: resumed |",
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
    lines.append(f"verdict, resumed:       {killed.verdict}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repetitions", type=int, default=6)
    p.add_argument("--sf", type=float, default=0.01)
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--dir", type=Path)
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
          f"the killed session in it: {'killed' in history}; run 3 marked resumed: {'resumed' in html}")


if __name__ == "__main__":
    main()
