"""perflab's own MySQL client against mysql_async 0.37, on sysbench's point_select
and read_only, on one managed MariaDB (issue 32: "measure both").

Builds crates/engine/examples/oltp_mysql_clients.rs with the `mysql-async-client`
feature in its own target directory under perflab's cache (the product's build is
untouched), starts a managed MariaDB (MariadbTarget, as oltp_vs_sysbench.py
--server mariadb), loads sbtest1..--tables of --table-size rows with perflab's
loader, then for each script and client count runs --pairs alternating pairs (the
first of a pair alternates): the example once with `own` (the engine's
MysqlOltpProtocol on epoll, or io_uring with --uring) and once with `mysql_async`
(one mysql_async Conn per client, prepared statements, binary protocol). Both run
on the engine's harness, the same threads (min(clients, cores)) and loop; only the
client differs. CPU per transaction is the example process's user + system over
the measured window (getrusage, from the harness).

Also prints the dependency count of the engine with and without the feature
(`cargo tree -e normal`) and the example's build time; --build-times also times a
clean release build of the engine library without and with the feature, each in a
fresh target directory (minutes).

    .venv/bin/python benchmarks/mysql_clients.py [--tables 4] [--table-size 10000]
        [--seconds 10] [--pairs 3] [--clients 8 32] [--uring] [--build-times]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import cores, pair_table, run_main
from perflab.cache import cache_root
from perflab.context import RunContext
from perflab.endpoints import MysqlWireEndpoint
from perflab.targets.mariadb import MariadbSettings, MariadbTarget
from perflab.workloads.oltp import OltpSettings, OltpWorkload

ROOT = Path(__file__).resolve().parent.parent
FEATURE = "mysql-async-client"
EXAMPLE = "oltp_mysql_clients"


def cargo(args: list[str], target_dir: Path) -> float:
    """Run cargo in the repository with its own target directory; the wall time."""
    started = time.monotonic()
    done = subprocess.run(["cargo", *args], cwd=ROOT, env={**os.environ, "CARGO_TARGET_DIR": str(target_dir)},
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"cargo {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def build_example(build_dir: Path) -> tuple[Path, float]:
    took = cargo(["build", "--release", "-p", "perflab-engine", "--example", EXAMPLE, "--features", FEATURE],
                 build_dir / "target")
    return build_dir / "target" / "release" / "examples" / EXAMPLE, took


def dependencies(features: list[str]) -> str:
    """`cargo tree -e normal` of the engine: its lines (`| wc -l`) and its distinct crates."""
    def tree(*extra: str) -> list[str]:
        return subprocess.run(["cargo", "tree", "-e", "normal", "-p", "perflab-engine", *features, *extra], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.splitlines()
    crates = {line.removesuffix(" (*)") for line in tree("--prefix", "none")}
    return f"{len(tree())} lines, {len(crates)} crates"


def clean_build_times(build_dir: Path) -> dict[str, float]:
    """A clean release build of the engine library, without and with the feature."""
    out = {}
    for name, features in (("own only", []), ("with mysql_async", ["--features", FEATURE])):
        target = build_dir / f"clean-{os.getpid()}"
        shutil.rmtree(target, ignore_errors=True)
        try:
            out[name] = cargo(["build", "--release", "-p", "perflab-engine", "--lib", *features], target)
        finally:
            shutil.rmtree(target, ignore_errors=True)
    return out


def run_client(binary: Path, client: str, script: str, conninfo: str, args: argparse.Namespace,
               clients: int) -> dict[str, Any]:
    done = subprocess.run([str(binary), client, script, conninfo, str(args.tables), str(args.table_size),
                           str(args.seconds), str(clients), str(min(clients, cores()))],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{EXAMPLE} {client} failed: {done.stderr.strip()[-2000:]}")
    r: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    r["cpu_per_tx_us"] = r["cpu_s"] / max(1, r["transactions"]) * 1e6
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--table-size", type=int, default=10_000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--scripts", nargs="+", default=["point_select", "read_only"])
    ap.add_argument("--uring", action="store_true", help="perflab's client on io_uring (default: epoll, as tokio)")
    ap.add_argument("--build-times", action="store_true",
                    help="also time clean release builds of the engine without and with mysql_async")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    args = ap.parse_args()

    build_dir = cache_root() / "build" / "mysql-clients"
    build_dir.mkdir(parents=True, exist_ok=True)
    binary, example_s = build_example(build_dir)
    deps = {"own only": dependencies([]), "with mysql_async": dependencies(["--features", FEATURE])}
    print(f"example built in {example_s:.1f} s ({build_dir}); cargo tree -e normal: "
          + ", ".join(f"{k} {v}" for k, v in deps.items()), flush=True)
    builds = clean_build_times(build_dir) if args.build_times else {}
    if builds:
        print("clean release build of the engine library: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in builds.items()), flush=True)

    own = "own-uring" if args.uring else "own"
    base = Path(tempfile.mkdtemp(prefix="perflab-mysql-clients-", dir="/tmp"))
    base.chmod(0o755)  # the server runs as `nobody` when we are root
    target = MariadbTarget(MariadbSettings.model_validate({
        "kind": "mariadb", "settings": {"max_connections": max(args.clients) + 20,
                                        "innodb_buffer_pool_size": "256M",
                                        "innodb_flush_log_at_trx_commit": 2},
    }), base / "target")
    rows: list[dict[str, Any]] = []
    try:
        ep = target.provision()
        assert isinstance(ep, MysqlWireEndpoint)
        print(f"server: {target.describe().get('version', '?')}; {cores()} cores, "
              f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
        OltpWorkload(OltpSettings.model_validate({"kind": "oltp", "tables": args.tables,
                                                  "table_size": args.table_size, "load_jobs": 2})).prepare(
            ep, RunContext(run_number=0, run_dir=base, t0_ns=time.monotonic_ns()))
        conninfo = ep.wire_conninfo()
        for script in args.scripts:
            for clients in args.clients:
                for pair in range(args.pairs):
                    order = [own, "mysql_async"] if pair % 2 == 0 else ["mysql_async", own]
                    got = {c: run_client(binary, c, script, conninfo, args, clients) for c in order}
                    rows.append({"script": script, "clients": clients, "pair": pair + 1, "own": got[own],
                                 "mysql_async": got["mysql_async"], "load_average": os.getloadavg()[0]})
                    a, b = got[own], got["mysql_async"]
                    print(f"  {script:12s} c={clients:<3d} pair {pair + 1} ({order[0]} first): own {a['tps']:8.1f} "
                          f"tps {a['cpu_per_tx_us']:6.1f} us/tx | mysql_async {b['tps']:8.1f} tps "
                          f"{b['cpu_per_tx_us']:6.1f} us/tx (failed {a['failed']}/{b['failed']}, lost "
                          f"{a['lost_clients']}/{b['lost_clients']})", flush=True)
    finally:
        target.teardown()
        shutil.rmtree(base, ignore_errors=True)

    print(f"\nperflab's client ({own}) against mysql_async, {args.pairs} alternating pairs of {args.seconds} s, "
          f"{args.tables} x {args.table_size} rows")
    pair_table(rows, args.scripts, "clients", args.clients, ("own", "mysql_async"), ("own", "mysql_async"),
               ("own/mysql_async tps", "own/mysql_async cpu"))
    print(f"load average at end {os.getloadavg()[0]:.1f} (other work on this machine moves every figure)")
    if args.json:
        args.json.write_text(json.dumps({"deps": deps, "example_build_s": example_s, "clean_build_s": builds,
                                         "runs": rows}, indent=1))
    return 0


if __name__ == "__main__":
    # Ctrl-C and SIGTERM run main's `finally`, which stops the server it started
    run_main(main)
