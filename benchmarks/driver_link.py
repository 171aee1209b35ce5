"""How true the driver's shaped link is: the latency a namespaced client adds
against what driver.network asks, and what the delay relay costs.

One experiment through the CLI (a managed PostgreSQL on TCP, select-only at
1 client, so one round trip per transaction): the driver local, and in its
namespace at each --delays one-way delay, --repetitions times in random
order. Per delay: the median latency added over the local runs of the same
repetition (expected: 2 x delay, one each way), its ratio to that, and the
relay's CPU per transaction (netem, where the kernel has it, costs perflab
nothing; the mechanism used is printed). Needs root.

    sudo .venv/bin/python benchmarks/driver_link.py [--delays 0.5 2 5] [--repetitions 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _common import run_main, spread
from perflab.store import Store

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--delays", type=float, nargs="+", default=[0.5, 2.0, 5.0], help="one-way delays, ms")
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perflab-bench-link-"))
    levels = ", ".join(f'{{ namespace = true, delay = "{d}ms", rate = "1gbit" }}' for d in args.delays)
    experiment = work / "link.toml"
    experiment.write_text(textwrap.dedent(f"""
        [experiment]
        name = "driver-link"
        repetitions = {args.repetitions}
        order = "random"
        [target]
        kind = "postgres"
        listen = "tcp"
        [workload]
        kind = "tpcb"
        script = "select-only"
        scale = 1
        clients = 1
        duration = "{args.seconds}s"
        warmup = "1s"
        [collect]
        [factors]
        "driver.network" = [{{ namespace = false }}, {levels}]
    """))
    out = work / "out"
    subprocess.run([sys.executable, "-m", "perflab.cli", "run", str(experiment), "--out", str(out), "--quiet",
                    "--no-report"], check=True)
    store = Store.open(out)
    values = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"])} for r in store.runs()}
    local: dict[int, float] = {}
    remote: dict[tuple[float, int], dict[str, float]] = {}
    for run in store.runs():
        net = run["factors"]["driver.network"]
        v = values[run["id"]]
        if not net.get("namespace"):
            local[run["repetition"]] = v["latency_p50_ms"]
        else:
            remote[(float(str(net["delay"]).removesuffix("ms")), run["repetition"])] = v
    print(f"select-only, 1 client, {args.seconds:g} s per run, {args.repetitions} repetitions; "
          f"local p50 {spread(list(local.values()), 3)} ms")
    print("| one-way delay | added p50 latency (ms) | added / (2 x delay) | mechanism | relay CPU per tx (us) |")
    print("|---|---|---|---|---|")
    for delay in args.delays:
        runs = [(rep, v) for (d, rep), v in remote.items() if d == delay]
        added = [v["latency_p50_ms"] - local[rep] for rep, v in runs]
        ratio = [a / (2 * delay) for a in added]
        mech = "netem" if runs[0][1].get("driver.network.netem") else "relay + tbf"
        cpu = [v["driver.relay_cpu_s"] / v["transactions"] * 1e6 for _, v in runs if "driver.relay_cpu_s" in v]
        print(f"| {delay:g} ms | {statistics.median(added):.3f} ({spread(added, 3)}) | "
              f"{statistics.median(ratio):.3f} ({spread(ratio, 3)}) | {mech} | "
              f"{f'{statistics.median(cpu):.1f}' if cpu else '-'} |")
    print(f"store: {out}")
    return 0


if __name__ == "__main__":
    run_main(main)
