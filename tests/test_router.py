"""The `router` target and the `stream` workload: three real namespaces, real
netfilter rules on the router's forward hook, traffic from perflab's engine
counted by its receiver.

All traffic stays inside the namespaces these tests make; every test removes
what it made, in a `finally` or a fixture, whatever happened.
"""

from __future__ import annotations

import os
import signal
import statistics
import textwrap
import time
from pathlib import Path

import pytest

from conftest import journaled_network_objects, start_run_until
from perflab.hostctl import netfilter, netns
from perflab.store import Store

# serial: measures the machine (timings, rates, other CPU) or changes it for everyone; runs after the parallel tests, alone
pytestmark = [pytest.mark.serial, pytest.mark.skipif(os.geteuid() != 0 or bool(netns.problems(("ip", "ethtool", "nft"))),
                                 reason="the router needs root, ip, ethtool and nft")]

# The guardian's undo after a SIGKILL, waited for: its promise (within 5 s)
# is a quiet machine's figure, measured by benchmarks/host_changes.py.
GONE_WITHIN_S = 60.0


def _experiment(workdir: Path, workload: str = 'duration = "2s"', rules: str = "{ count = 0 }", more: str = "",
                repetitions: int = 1) -> Path:
    path = workdir / "e.toml"
    path.write_text(textwrap.dedent("""
        [experiment]
        name = "router"
        repetitions = {repetitions}
        order = "random"   # the levels interleaved, so a machine that slows down hurts each alike
        seed = 1
        [target]
        kind = "router"
        rules = {rules}
        [workload]
        kind = "stream"
        warmup = "0.5s"
        {workload}
        [collect]
    """).format(repetitions=repetitions, rules=rules, workload=workload) + textwrap.dedent(more))
    return path


def _runs(out: Path) -> list[tuple[dict, dict[str, float]]]:
    store = Store.open(out)
    return [(r, {m["name"]: m["value"] for m in store.metrics(r["id"])}) for r in store.runs()]


def test_linear_rules_cost_throughput_a_set_does_not_and_the_packets_cross_them(
        workdir: Path, run_cli, namespaces_as_found: set[str]) -> None:
    # Small UDP frames flat out: the router's per-packet work is what limits.
    experiment = _experiment(workdir, 'protocol = "udp"\nframe_size = 128\nduration = "2s"', repetitions=4, more="""
        [factors]
        "target.rules" = [{ count = 0 }, { count = 1000, type = "nomatch-address", backend = "iptables-legacy" },
                          { count = 1000, type = "set", backend = "nft" }]
    """)
    out = workdir / "out"
    run_cli("run", experiment, "--out", out, "--quiet", "--no-report", timeout=300)
    by: dict[str, list[dict[str, float]]] = {}
    for run, m in _runs(out):
        assert run["status"] == "done"
        rules = run["factors"]["target.rules"]
        by.setdefault(rules.get("type", "none") if rules["count"] else "none", []).append(m)
        assert m["rules.count"] == rules["count"] and m["rules.install_s"] > 0
        # every datagram the receiver got crossed the whole rule list (the final counting rule saw it)
        assert m["rules.passed_packets"] >= m["udp_received"] > 1000
    pps = {k: statistics.median(m["pps"] for m in v) for k, v in by.items()}
    assert pps["nomatch-address"] < pps["none"] * 0.9, pps
    # The set loses no more than the noise: within the spread of the runs without rules.
    noise_floor = min(m["pps"] for m in by["none"])
    assert pps["set"] >= noise_floor * 0.8, (pps, noise_floor)
    assert pps["set"] > pps["nomatch-address"], pps
    assert sorted(set(netns.leftovers()) - namespaces_as_found) == []
    # The report fits goodput against the rule count, the no-rule runs the x = 0 of every line.
    run_cli("report", out)
    html = (out / "report.html").read_text()
    assert "Throughput lost per 1000 rules" in html and "set (nft)" in html and "nomatch-address (iptables-legacy)" in html
    assert (out / "figures" / "stream-rules.svg").exists()


@pytest.mark.parametrize("receiver", ["threads", "epoll"])
def test_ipv6_tcp_end_to_end_through_the_router(workdir: Path, run_cli, namespaces_as_found: set[str],
                                                receiver: str) -> None:
    experiment = _experiment(workdir, f'protocol = "tcp"\nfamily = "ipv6"\nflows = 2\nreceiver = "{receiver}"\nduration = "2s"',
                             rules='{ count = 10, type = "nomatch-port", backend = "iptables-nft" }')
    out = workdir / "out"
    run_cli("run", experiment, "--out", out, "--quiet", "--no-report")
    [(run, m)] = _runs(out)
    assert run["status"] == "done", run
    assert m["goodput_mbps"] > 10 and m["rules.passed_packets"] > 100 and m["mss_bytes"] == 1518 - 18 - 40 - 20
    assert m["router_pps"] > 0 and "cpu.softirq_s" in m and m["receiver_cpu_s"] > 0
    target = Store.open(out).runs()[0]["target"]
    assert target["offloads"]["tso"] is True and target["rules"]["count"] == 10
    assert sorted(set(netns.leftovers()) - namespaces_as_found) == []


def test_sigkill_mid_run_leaves_no_namespace_veth_or_rule(workdir: Path, namespaces_as_found: set[str],
                                                           run_cli) -> None:
    experiment = _experiment(workdir, 'protocol = "udp"\nduration = "120s"\nrate = "50mbit"',
                             rules="{ count = 100 }")
    out = workdir / "out"
    # The three namespaces exist for the whole run (the veths are in them,
    # not in this namespace, once set up); the rules go in right after. Only
    # the run's own (from its journal) are looked at, never another experiment's.
    made: set[str] = set()

    def ready() -> bool:
        made.update(journaled_network_objects(out))
        return len(made) >= 3 and set(netns.leftovers()) >= made and bool(list(out.glob("runs/001")))

    run = start_run_until(experiment, out, ready)
    try:
        time.sleep(1.5)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while set(netns.leftovers()) & made and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sorted(set(netns.leftovers()) & made) == []
    finally:
        if run.poll() is None:
            run.kill()


@pytest.mark.parametrize(("target", "workload", "expected"), [
    ('rules = { count = 10, type = "set", backend = "iptables-legacy" }', "", 'backend = "nft"'),
    ("", 'protocol = "udp"\nfamily = "ipv6"\nframe_size = 64', "at least 67"),
    ("", 'protocol = "tcp"\nrate = "10mbit"', "rate paces UDP"),
    ('rules = { count = 1000001 }', "", "target.rules.count"),
])
def test_a_plan_perflab_cannot_run_is_a_clear_error(workdir: Path, run_cli, target: str, workload: str,
                                                    expected: str) -> None:
    path = workdir / "bad.toml"
    path.write_text(f'[experiment]\nname = "x"\n[target]\nkind = "router"\n{target}\n[workload]\nkind = "stream"\n'
                    f"{workload}\n")
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_rule_texts_have_the_count_asked() -> None:
    for rtype in ("nomatch-address", "nomatch-port"):
        rules = netfilter.RuleSettings(count=7, type=rtype, backend="iptables-legacy")
        assert netfilter.iptables_text(rules, "ipv6").count("-A FORWARD") == 8
        nft = netfilter.nft_text(netfilter.RuleSettings(count=7, type=rtype))
        assert nft.count(" drop") == 14 and nft.count("counter accept") == 2
    nft = netfilter.nft_text(netfilter.RuleSettings(count=3, type="set"))
    assert "240.0.0.3" in nft and "fd00:dead::3" in nft and nft.count("@perflab_nomatch drop") == 2
