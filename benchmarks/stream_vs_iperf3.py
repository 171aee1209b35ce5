"""perflab's stream workload against iperf3 over the same router path.

One `router` target (three namespaces, 0 rules, MTU 1520 so a 1,472-byte
UDP payload crosses IPv6 unfragmented too) is made, and always removed. Each
case runs iperf3 and perflab alternately (the order swapped every pair), for
--pairs pairs of --seconds each:

- TCP, 1 and 4 flows, IPv4: goodput at the receiver (iperf3's
  sum_received, perflab's goodput_mbps). Target: perflab >= 0.95 x iperf3.
- UDP, 1,472-byte payloads, IPv4 and IPv6, at the same offered datagram
  rate (--udp-mbit of payload, iperf3's -b): datagrams received per second
  (iperf3's packets - lost_packets, perflab's udp_received). Target: within
  1% of iperf3's.

Needs root, iperf3 (Debian's package; `./dev setup` installs it).

    sudo .venv/bin/python benchmarks/stream_vs_iperf3.py [--pairs 3] [--seconds 5] [--udp-mbit 300]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import run_main, spread
from perflab.context import RunContext
from perflab.targets.router import NetworkEndpoint, RouterSettings, RouterTarget
from perflab.workloads.stream import StreamSettings, StreamWorkload

PORT = 5299
UDP_PAYLOAD = 1472
WARMUP_S = 1.0


def iperf3(ep: NetworkEndpoint, case: dict, seconds: float, udp_mbit: float) -> float:
    family = case["family"]
    addr = ep.server_address(family)
    server = subprocess.Popen(["ip", "netns", "exec", ep.server_ns, "iperf3", "-s", "-1", "-B", addr, "-p",
                               str(PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        args = ["ip", "netns", "exec", ep.client_ns, "iperf3", "-c", addr, "-p", str(PORT), "-t", str(seconds),
                "-O", str(WARMUP_S), "-P", str(case["flows"]), "--json"]
        if case["protocol"] == "udp":
            args += ["-u", "-b", f"{udp_mbit}M", "-l", str(UDP_PAYLOAD)]
        out = json.loads(subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60).stdout)
    finally:
        server.wait(timeout=30)
    end = out["end"]
    if case["protocol"] == "tcp":
        return float(end["sum_received"]["bits_per_second"]) / 1e6
    s = end["sum"]
    return (s["packets"] - s["lost_packets"]) / float(s["seconds"])


def perflab(ep: NetworkEndpoint, case: dict, seconds: float, udp_mbit: float, work: Path) -> float:
    ip = 20 if case["family"] == "ipv4" else 40
    frame = UDP_PAYLOAD + 8 + ip + 18 if case["protocol"] == "udp" else 1500 + 18
    pps = udp_mbit * 1e6 / (UDP_PAYLOAD * 8)
    settings = StreamSettings.model_validate({
        "kind": "stream", "protocol": case["protocol"], "family": case["family"], "flows": case["flows"],
        "frame_size": frame if case["protocol"] == "udp" else 1518, "duration": seconds, "warmup": WARMUP_S,
        **({"rate": f"{pps * frame * 8:.0f}bit"} if case["protocol"] == "udp" else {}),
    })
    ctx = RunContext(run_number=0, run_dir=work, t0_ns=time.monotonic_ns())
    m = StreamWorkload(settings).run(ep, ctx).metrics
    if case["protocol"] == "tcp":
        return m["goodput_mbps"].value
    return m["pps"].value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--udp-mbit", type=float, default=300.0, help="UDP payload rate offered by both, Mbit/s")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="perflab-bench-stream-"))
    target = RouterTarget(RouterSettings(kind="router", mtu=1520), work / "target", work)
    cases = [
        {"protocol": "tcp", "family": "ipv4", "flows": 1},
        {"protocol": "tcp", "family": "ipv4", "flows": 4},
        {"protocol": "udp", "family": "ipv4", "flows": 1},
        {"protocol": "udp", "family": "ipv6", "flows": 1},
    ]
    try:
        ep = target.provision()
        assert isinstance(ep, NetworkEndpoint)
        rows = []
        for case in cases:
            ours, theirs = [], []
            for pair in range(args.pairs):
                order = ("iperf3", "perflab") if pair % 2 == 0 else ("perflab", "iperf3")
                for side in order:
                    if side == "iperf3":
                        theirs.append(iperf3(ep, case, args.seconds, args.udp_mbit))
                    else:
                        ours.append(perflab(ep, case, args.seconds, args.udp_mbit, work))
            ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
            unit = "Mbit/s" if case["protocol"] == "tcp" else "datagrams/s received"
            rows.append((f"{case['protocol']} {case['family']} {case['flows']} flow(s)", unit,
                         statistics.median(theirs), statistics.median(ours), statistics.median(ratios),
                         spread(ratios, 3)))
            print(f"{rows[-1][0]}: iperf3 {theirs} perflab {ours}", file=sys.stderr)
    finally:
        target.teardown()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.pairs} pairs of {args.seconds:g} s, alternating; UDP offered {args.udp_mbit:g} Mbit/s of "
          f"{UDP_PAYLOAD}-byte payloads")
    print("| case | unit | iperf3 (median) | perflab (median) | perflab / iperf3 (median) | range over pairs |")
    print("|---|---|---|---|---|---|")
    for name, unit, theirs, ours, ratio, rng in rows:
        print(f"| {name} | {unit} | {theirs:,.1f} | {ours:,.1f} | {ratio:.3f} | {rng} |")
    return 0


if __name__ == "__main__":
    run_main(main)
