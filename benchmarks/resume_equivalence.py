"""A DBT-3 durability study SIGKILLed during run 3's refresh functions and
resumed, against an uninterrupted copy (issue 34): the same refresh pairs run
by run, and the degradation table of each.

    .venv/bin/python benchmarks/resume_equivalence.py [--repetitions 6] [--sf 0.01] [--streams 2] [--dir DIR]

Both copies run the same experiment file (tests = ["throughput"], maintenance
VACUUM ANALYZE between runs, seed fixed so both use the same refresh blocks).
The killed copy is SIGKILLed as soon as run 3's first RF1 has committed (its
orders are in the database), then `perflab show` and `perflab resume` run.
Prints, per copy: each run's repetition, Throughput@Size, change from the
first run, its refresh pairs and its marks (resumed, retried, fresh load), and
the degradation verdict; then whether the pair sequences are equal. The
throughput figures are measurements and differ between copies by the
machine's noise; the pairs, rows and repetition numbers must not.
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
from pathlib import Path

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


def table(out: Path) -> tuple[str, list[tuple[int, str]]]:
    store = Store.open(out)
    marks = store.run_marks()
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
    done = [r for r in runs if r["id"] in values]
    assessed = degradation.assess([values[r["id"]] for r in done], True, positions=[r["repetition"] for r in done])
    change = dict(zip([r["id"] for r in done], assessed.change_pct, strict=True))
    lines = ["| run | repetition | Throughput@Size | change from first | refresh pairs | note |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in runs:
        v = values.get(r["id"])
        pct = "–" if v is None else f"{change[r['id']]:+.2f}%"
        lines.append(f"| #{r['id']} | {r['repetition']} | {'–' if v is None else f'{v:,.0f}'} | {pct} | "
                     f"{', '.join(map(str, pairs.get(r['id'], []))) or '–'} | "
                     f"{', '.join(marks.get(r['id'], [])) or ('' if v is not None else r['status'])} |")
    lines.append(f"\nverdict: {assessed.verdict}")
    store.close()
    return "\n".join(lines), sequence


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
    (t_plain, s_plain), (t_killed, s_killed) = table(plain), table(killed)
    print(f"## uninterrupted ({plain})\n\n{t_plain}\n\n## killed in run 3's refresh, resumed ({killed})\n\n{t_killed}\n")
    print(f"refresh sequences (pair, rows, run by run) equal: {s_plain == s_killed} ({len(s_plain)} functions)")


if __name__ == "__main__":
    main()
