"""perflab's HTTP driver against wrk, on one managed nginx.

Starts one nginx with perflab's own NginxTarget (and always stops it) on a
SPECweb99-like file set of --size (default 1.5 GB, generated once into the
cache, or reused), then runs wrk and perflab alternately, --pairs pairs per
connection count (--connections 16 64 256), both with --threads threads and
closed loop, keep-alive, --seconds each:

- the file-set table: wrk with a Lua script that replays --paths request
  paths drawn by perflab's own chooser (`_engine.fileset_request_paths`: the
  same class 35/50/14/1 %, Zipf directory and file), each thread starting at
  its own offset; perflab drawing the same mix itself;
- the raw-rate table: one 1 KiB file (dir00000/class1_0) for both; wrk with
  no script (its fastest path).

Driver CPU per request: wrk's whole process (the child's rusage from
os.wait4) over its requests; perflab's driver threads over the measured
window (`driver_cpu_s`) over its good responses, and the growth of this
process's getrusage around the call beside it (connection set-up, the
coordinator and Python included). Ratios are perflab / wrk per pair; the
table gives their mean and range. Both drivers share the machine's cores
with nginx, so a cheaper driver leaves the server more CPU.

    .venv/bin/python benchmarks/http_vs_wrk.py [--size 1.5GB] [--seconds 5] [--pairs 3]
        [--connections 16 64 256] [--threads 1] [--workers 1] [--io auto epoll] [--hyper] [--json out.json]

--io runs perflab once per pair for each socket I/O given (default: auto,
which is io_uring where the kernel has it, and epoll), each against the same
wrk run; a table per I/O.

--hyper also runs hyper 1.x's HTTP/1.1 client on the same harness after each
perflab run (same draws, checks and error kinds; crates/engine/src/http/
hyper_client.rs), in an engine built with `--features hyper-client`.

--floor also runs, after them in each pair, the cheapest closed-loop drivers
we know how to write, on epoll and on io_uring (crates/engine/examples/
driver_floor.rs: per request one send, one recv and a share of one
epoll_wait, or a linked send and receive and a share of one io_uring_enter;
no clock, no histogram, no check beyond the length; built here with cargo),
with the same connections, threads and paths: how far each driver sits
above what the kernel's side of a round trip costs on this machine.

wrk 4.1.0 from Debian (apt-get install wrk); oha joins each pair when it is on
PATH or given (--oha; `cargo install oha`), the file set through its
--urls-from-file where that version has it.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import driver_floor, mean_spread, run_child, run_floor, run_main, spread
from perflab import _engine
from perflab.endpoints import HttpEndpoint
from perflab.targets.nginx import NginxSettings, NginxTarget
from perflab.units import parse_size_bytes
from perflab.workloads.harness import engine_settings_of
from perflab.workloads.http import default_cache_dir

RAW_FILE = (0, 1, 0)  # dir00000/class1_0: 1024 bytes
LUA = """
local paths = {}
local counter = 0
local i = 0
function setup(thread)
  counter = counter + 1
  thread:set("offset", counter)
end
function init(args)
  for line in io.lines(args[1]) do paths[#paths + 1] = line end
  i = (offset * 7919) % #paths
end
function request()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
"""

FLOORS = ("epoll", "uring")
UNITS = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}


def run_wrk(url: str, connections: int, threads: int, seconds: int, script: Path | None,
            paths: Path | None) -> dict[str, Any]:
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script is not None:
        args += ["-s", str(script)]
    args.append(url)
    if paths is not None:
        args += ["--", str(paths)]
    code, text, error, usage = run_child(args)
    if code != 0:
        raise RuntimeError(f"wrk failed: {(text + error)[-2000:]}")
    m = re.search(r"(\d+) requests in ([0-9.]+)(m?s)", text)
    assert m, text
    requests = int(m.group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    socket_errors = re.search(r"Socket errors: (.*)", text)
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))  # type: ignore[union-attr]
    cpu = usage.ru_utime + usage.ru_stime
    return {"req_per_s": rps, "requests": requests, "cpu_s": cpu, "cpu_per_req_us": cpu / requests * 1e6,
            "non_2xx": int(errors.group(1)) if errors else 0,
            "socket_errors": socket_errors.group(1) if socket_errors else ""}


def run_oha(oha: str, base: str, connections: int, seconds: int, paths: Path | None,
            threads: int) -> dict[str, Any] | None:
    """oha (Rust, tokio) with the same connections and, where this version
    has --worker-threads, the same threads (its default is one per core);
    the file set through its --urls-from-file where this version has it. Its
    CPU: the child's rusage."""
    help_text = subprocess.run([oha, "--help"], capture_output=True, text=True, check=False).stdout
    args = [oha, "-z", f"{seconds}s", "-c", str(connections), "--no-tui"]
    if "--worker-threads" in help_text:
        args += ["--worker-threads", str(threads)]
    args += ["--output-format", "json"] if "--output-format" in help_text else ["--json"]
    if paths is not None:
        if "--urls-from-file" not in help_text:
            return None
        urls = paths.with_suffix(".urls")
        if not urls.exists():
            urls.write_text("".join(base.rstrip("/") + line + "\n" for line in paths.read_text().split()))
        args += ["--urls-from-file", str(urls)]
    else:
        args.append(base)
    code, text, error, usage = run_child(args)
    if code != 0:
        raise RuntimeError(f"oha failed: {(text + error)[-2000:]}")
    summary = json.loads(text[text.index("{"):])
    codes = summary.get("statusCodeDistribution", {})
    requests = sum(int(n) for n in codes.values())
    cpu = usage.ru_utime + usage.ru_stime
    return {"req_per_s": summary["summary"]["requestsPerSec"], "requests": requests, "cpu_s": cpu,
            "cpu_per_req_us": cpu / max(1, requests) * 1e6,
            "non_200": sum(int(n) for c, n in codes.items() if c != "200")}


def run_http_floor(floor: str, hostport: str, connections: int, threads: int, seconds: int,
                   paths: Path | None, io: str) -> dict[str, Any]:
    """The floor (driver_floor.rs) on epoll or io_uring, same paths."""
    which = f"@{paths}" if paths is not None else "/dir00000/class1_0"
    mode = ["--uring"] if io == "uring" else []
    return run_floor([floor, "http", *mode, hostport, str(seconds), str(connections), str(threads), which])


def run_perflab(ep: HttpEndpoint, dirs: int, connections: int, threads: int, seconds: int,
                only: tuple[int, int, int] | None, client: str = "own", io: str = "auto") -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    out = _engine.http_run(ep.address, host=ep.host_header, dirs=dirs, t0_ns=time.monotonic_ns(), only=only, client=client,
                           harness=engine_settings_of(clients=connections, threads=threads, duration=float(seconds),
                                                      seed=int(time.time()), io=io, pin="off", follow=False))
    after = resource.getrusage(resource.RUSAGE_SELF)
    whole = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    n = max(1, out.transactions)
    return {"req_per_s": out.tps, "requests": out.transactions, "errors": out.failed,
            "cpu_s": out.driver_cpu_s, "cpu_per_req_us": out.driver_cpu_s / n * 1e6,
            "process_cpu_per_req_us": whole / n * 1e6, "client_bound": out.client_bound,
            "mbps": out.body_bytes * 8 / out.measured_s / 1e6, "io": out.io,
            "io_enters_per_req": out.io_enters_per_tx}


def hyper_table(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    print("| connections | own req/s | hyper req/s | hyper/own req/s | own CPU us/req | hyper CPU us/req "
          "| hyper/own CPU |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        own, hyp = [p[0] for _, p in row["pairs"]], row["hyper"]
        rr = [h["req_per_s"] / o["req_per_s"] for o, h in zip(own, hyp, strict=True)]
        cr = [h["cpu_per_req_us"] / o["cpu_per_req_us"] for o, h in zip(own, hyp, strict=True)]
        print(f"| {row['connections']} | {statistics.mean(o['req_per_s'] for o in own):,.0f} "
              f"| {statistics.mean(h['req_per_s'] for h in hyp):,.0f} | {statistics.mean(rr):.2f} ({spread(rr)}) "
              f"| {statistics.mean(o['cpu_per_req_us'] for o in own):.1f} "
              f"| {statistics.mean(h['cpu_per_req_us'] for h in hyp):.1f} | {statistics.mean(cr):.2f} ({spread(cr)}) |")


def table(title: str, rows: list[dict[str, Any]], which: int) -> None:
    print(f"\n{title}")
    print("| connections | wrk req/s | perflab req/s | req/s ratio | wrk CPU us/req | perflab CPU us/req "
          "(process) | CPU ratio |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        pairs = [(w, p[which]) for w, p in row["pairs"]]
        rr = [p["req_per_s"] / w["req_per_s"] for w, p in pairs]
        cr = [p["cpu_per_req_us"] / w["cpu_per_req_us"] for w, p in pairs]
        w_rps = statistics.mean(w["req_per_s"] for w, _ in pairs)
        p_rps = statistics.mean(p["req_per_s"] for _, p in pairs)
        w_cpu = statistics.mean(w["cpu_per_req_us"] for w, _ in pairs)
        p_cpu = statistics.mean(p["cpu_per_req_us"] for _, p in pairs)
        p_proc = statistics.mean(p["process_cpu_per_req_us"] for _, p in pairs)
        print(f"| {row['connections']} | {w_rps:,.0f} | {p_rps:,.0f} | {statistics.mean(rr):.2f} ({spread(rr)}) "
              f"| {w_cpu:.1f} | {p_cpu:.1f} ({p_proc:.1f}) | {statistics.mean(cr):.2f} ({spread(cr)}) |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="1.5GB")
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--connections", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="nginx worker_processes")
    ap.add_argument("--paths", type=int, default=200_000, help="request paths wrk replays")
    ap.add_argument("--cache-dir", default=str(default_cache_dir()))
    ap.add_argument("--io", nargs="+", default=["auto", "epoll"], choices=["auto", "uring", "epoll"],
                    help="perflab's socket I/O, one run per pair for each")
    ap.add_argument("--hyper", action="store_true",
                    help="also run hyper 1.x's client (an engine built with --features hyper-client)")
    ap.add_argument("--oha", default=shutil.which("oha"), help="the oha binary (default: on PATH)")
    ap.add_argument("--floor", action="store_true",
                    help="also run the epoll and io_uring floors (crates/engine/examples/driver_floor.rs) in each pair")
    ap.add_argument("--json")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk")
        return 2
    floor = driver_floor() if args.floor else None
    dirs = _engine.fileset_dirs(size_bytes=parse_size_bytes(args.size))
    work = Path(tempfile.mkdtemp(prefix="perflab-http-vs-wrk-"))
    work.chmod(0o755)
    target = NginxTarget(NginxSettings.model_validate(
        {"kind": "nginx", "settings": {"worker_processes": args.workers}}), work / "nginx")
    results: dict[str, Any] = {"args": vars(args), "dirs": dirs, "fileset": [], "raw": []}
    try:
        ep = target.provision()
        assert isinstance(ep, HttpEndpoint) and ep.publish is not None
        report = _engine.fileset_prepare(args.cache_dir, dirs=dirs, seed=1, jobs=2)
        print(f"file set: {dirs} directories, {report.size_bytes / 1e9:.2f} GB, "
              f"{'generated' if report.generated else 'reused'} in {report.seconds:.1f} s")
        ep.publish(Path(report.root))
        # Read the set once so that both drivers meet a warm page cache.
        for path in Path(report.root).rglob("class*"):
            path.read_bytes()
        paths = work / "paths.txt"
        paths.write_text("\n".join("/" + p for p in _engine.fileset_request_paths(dirs, 1, args.paths)) + "\n")
        script = work / "replay.lua"
        script.write_text(LUA)
        base = f"http://{ep.host_header}/"
        for kind, only in (("fileset", None), ("raw", RAW_FILE)):
            for connections in args.connections:
                threads = min(args.threads, connections)
                pairs, hyper, oha_runs, floor_runs = [], [], [], []
                for i in range(args.pairs):
                    if only is None:
                        w = run_wrk(base, connections, threads, args.seconds, script, paths)
                    else:
                        w = run_wrk(base + "dir00000/class1_0", connections, threads, args.seconds, None, None)
                    url = base if only is None else base + "dir00000/class1_0"
                    ps = [run_perflab(ep, dirs, connections, threads, args.seconds, only, io=io) for io in args.io]
                    print(f"{kind} c={connections} pair {i + 1}: wrk {w['req_per_s']:,.0f} req/s "
                          f"{w['cpu_per_req_us']:.1f} us/req (non-2xx {w['non_2xx']}); " + "; ".join(
                              f"perflab {p['io']} {p['req_per_s']:,.0f} req/s {p['cpu_per_req_us']:.1f} us/req "
                              f"(errors {p['errors']})" for p in ps), flush=True)
                    pairs.append((w, ps))
                    if args.hyper:
                        h = run_perflab(ep, dirs, connections, threads, args.seconds, only, client="hyper")
                        print(f"  hyper: {h['req_per_s']:,.0f} req/s {h['cpu_per_req_us']:.1f} us/req "
                              f"(errors {h['errors']})", flush=True)
                        hyper.append(h)
                    if args.oha:
                        o = run_oha(args.oha, url, connections, args.seconds, paths if only is None else None,
                                    args.threads)
                        if o is not None:
                            print(f"  oha: {o['req_per_s']:,.0f} req/s {o['cpu_per_req_us']:.1f} us/req "
                                  f"(non-200 {o['non_200']})", flush=True)
                            oha_runs.append(o)
                    if floor is not None:
                        run = {"wrk": w, "perflab": ps[0]}
                        for io in FLOORS:
                            f = run_http_floor(floor, ep.host_header, connections, threads, args.seconds,
                                          paths if only is None else None, io)
                            print(f"  floor {io}: {f['req_per_s']:,.0f} req/s {f['cpu_per_req_us']:.1f} us/req "
                                  f"(user {f['user_per_req_us']:.2f}, system {f['system_per_req_us']:.2f}; "
                                  f"errors {f['errors']})", flush=True)
                            run[io] = f
                        floor_runs.append(run)
                results[kind].append({"connections": connections, "threads": threads, "pairs": pairs,
                                      "hyper": hyper, "oha": oha_runs, "floor": floor_runs})
        for which, io in enumerate(args.io):
            ran = results["fileset"][0]["pairs"][0][1][which]["io"] if results["fileset"] else io
            table(f"perflab io = {io} ({ran}): file set ({report.size_bytes / 1e9:.2f} GB, wrk replaying "
                  f"perflab's paths), {args.threads} thread(s), {args.seconds} s runs", results["fileset"], which)
            table(f"perflab io = {io} ({ran}): one 1 KiB file (raw request rate), {args.threads} thread(s), "
                  f"{args.seconds} s runs", results["raw"], which)
        for kind in ("fileset", "raw"):
            rows = [r for r in results[kind] if r["oha"]]
            if rows:
                print(f"\noha, {kind}: connections, oha req/s, oha CPU us/req, perflab/oha CPU")
                for r in rows:
                    o_cpu = statistics.mean(o["cpu_per_req_us"] for o in r["oha"])
                    p_cpu = statistics.mean(p[0]["cpu_per_req_us"] for _, p in r["pairs"])
                    print(f"| {r['connections']} | {statistics.mean(o['req_per_s'] for o in r['oha']):,.0f} "
                          f"| {o_cpu:.1f} | {p_cpu / o_cpu:.2f} |")
        for kind in ("fileset", "raw"):
            rows = [r for r in results[kind] if r["floor"]]
            for io in FLOORS if rows else ():
                print(f"\n{io} floor, {kind} (perflab io = {args.io[0]}): | connections | floor req/s "
                      "| floor us/req (user, system) | floor/wrk CPU | perflab/floor CPU | perflab/wrk CPU |")
                for r in rows:
                    fl = r["floor"]
                    cpu = {who: [x[who]["cpu_per_req_us"] for x in fl] for who in (io, "wrk", "perflab")}

                    def mean(key: str, fl: list[dict[str, Any]] = fl, io: str = io) -> float:
                        return statistics.mean(x[io][key] for x in fl)

                    print(f"| {r['connections']} | {mean('req_per_s'):,.0f} | {mean('cpu_per_req_us'):.2f} "
                          f"({mean('user_per_req_us'):.2f}, {mean('system_per_req_us'):.2f}) "
                          f"| {mean_spread([f / w for f, w in zip(cpu[io], cpu['wrk'], strict=True)])} "
                          f"| {mean_spread([p / f for p, f in zip(cpu['perflab'], cpu[io], strict=True)])} "
                          f"| {mean_spread([p / w for p, w in zip(cpu['perflab'], cpu['wrk'], strict=True)])} |")
        if args.hyper:
            hyper_table("hyper 1.x against perflab's own client, file set", results["fileset"])
            hyper_table("hyper 1.x against perflab's own client, one 1 KiB file", results["raw"])
    finally:
        target.teardown()
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    run_main(main)
