"""driver.network: the driver in a network namespace of perflab's own, over a
shaped veth link, against a real managed PostgreSQL on TCP.

The namespace path must really add the configured delay (whichever mechanism
made it: netem where the kernel has it, else perflab's delay relay), tbf must
really limit the rate, and nothing (namespace, veth, qdisc, relay) may be
left after a run, after Ctrl-C, or after a SIGKILL. Every test removes what
it made in a `finally`, whatever happened.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import journaled_network_objects, postmasters_under, start_run_until
from perflab import _engine
from perflab.hostctl import netns
from perflab.store import Store

# serial: measures the machine (timings, rates, other CPU) or changes it for everyone; runs after the parallel tests, alone
pytestmark = [pytest.mark.serial, pytest.mark.skipif(os.geteuid() != 0 or bool(netns.problems()),
                                 reason="network namespaces need root, ip and tc")]

# The guardian's undo after a SIGKILL, waited for: its promise (within 5 s)
# is a quiet machine's figure, measured by benchmarks/host_changes.py.
GONE_WITHIN_S = 60.0


def _leftovers_of_this_test(before: set[str]) -> list[str]:
    return sorted(set(netns.leftovers()) - before)


def _experiment(workdir: Path, network: str, duration: str = "3s", factors: str = "") -> Path:
    path = workdir / "e.toml"
    path.write_text(textwrap.dedent(f"""
        [experiment]
        name = "drivernet"
        [target]
        kind = "postgres"
        listen = "tcp"
        [workload]
        kind = "tpcb"
        script = "select-only"
        scale = 1
        clients = 1
        duration = "{duration}"
        [driver]
        network = {network}
        [collect]
    """) + factors)
    return path


def _metrics(out: Path, run_id: int) -> dict[str, float]:
    store = Store.open(out)
    return {m["name"]: m["value"] for m in store.metrics(run_id)}


# ------------------------------------------------------------ the link itself


@contextlib.contextmanager
def _link() -> Iterator[netns.Link]:
    tag = netns.new_tag()
    ns = f"perflab-{tag}-test"
    netns.create_netns(ns)
    try:
        link = netns.create_veth(f"perflab{tag}h", None, f"perflab{tag}d", ns, netns.free_subnets(1)[0])
        try:
            yield link
        finally:
            netns.delete_link(link.a.dev)
    finally:
        netns.delete_netns(ns)


def _sink(address: str) -> tuple[socket.socket, threading.Thread, list[int]]:
    """A TCP server in the root namespace that reads everything sent to it."""
    server = socket.create_server((address, 0))
    got = [0]

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(1 << 16):
                got[0] += len(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread, got


@pytest.mark.serial  # it times a transfer: the suite's serial half runs it alone
def test_tbf_really_limits_the_rate_of_the_namespaces_link(namespaces_as_found: set[str]) -> None:
    with _link() as link:
        shape = netns.Shape(rate_bps=20e6)
        assert {netns.shape(end, shape, netem=False) for end in (link.a, link.b)} == {"tbf"}
        assert "tbf" in netns.qdiscs(link.a) and "tbf" in netns.qdiscs(link.b)
        server, thread, got = _sink(str(link.a.v4.ip))
        payload = b"x" * (2_500_000)  # 20 Mbit: 1.0 s at 20 Mbit/s
        with netns.entered(link.b.ns or ""):
            client = socket.create_connection((str(link.a.v4.ip), server.getsockname()[1]), timeout=10)
        started = time.monotonic()
        client.sendall(payload)
        client.close()
        thread.join(timeout=10)
        elapsed = time.monotonic() - started
        server.close()
        assert got[0] == len(payload)
        # at least the shaped time (the limit holds); the upper bound only catches a link shaped far too slow
        assert 0.8 < elapsed < 2.5, f"{elapsed:.2f} s for 20 Mbit at 20 Mbit/s"
    assert _leftovers_of_this_test(namespaces_as_found) == []


def test_the_relay_runs_inside_the_namespace_it_was_started_in(namespaces_as_found: set[str]) -> None:
    with _link() as link:
        server, thread, got = _sink(str(link.a.v4.ip))
        upstream = f"{link.a.v4.ip}:{server.getsockname()[1]}"
        with netns.entered(link.b.ns or ""):
            relay = _engine.DelayRelay("127.0.0.1:0", upstream, 0.001)
            client = socket.create_connection(("127.0.0.1", relay.port), timeout=10)
        # From the root namespace, the relay's port on 127.0.0.1 is not there.
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", relay.port), timeout=2).close()
        client.sendall(b"y" * 1000)
        client.close()
        thread.join(timeout=10)
        stats = relay.stop()
        server.close()
        assert got[0] == 1000
        assert stats["connections"] == 1 and stats["bytes_up"] == 1000 and stats["cpu_s"] > 0


# ------------------------------------------------------------ through experiments


@pytest.mark.parametrize("mechanism", ["relay", "netem"])
def test_the_namespace_path_adds_the_configured_delay(workdir: Path, run_cli, namespaces_as_found: set[str],
                                                      mechanism: str) -> None:
    if mechanism == "netem" and netns.netem_status() is False:
        pytest.skip("this kernel is built without netem (CONFIG_NET_SCH_NETEM is not set)")
    delay_ms = 2.0
    experiment = _experiment(
        workdir, f'{{ namespace = true, delay = "{delay_ms}ms", rate = "1gbit", mechanism = "{mechanism}" }}',
        factors='[factors]\n"driver.network.namespace" = [false, true]\n')
    out = workdir / "out"
    run_cli("run", experiment, "--out", out, "--quiet", "--no-report")
    local, remote = _metrics(out, 1), _metrics(out, 2)
    added = remote["latency_p50_ms"] - local["latency_p50_ms"]
    # select-only at 1 client: one round trip per transaction, so 2 x the one-way delay
    assert 2 * delay_ms * 0.95 < added < 2 * delay_ms * 1.25, (local["latency_p50_ms"], remote["latency_p50_ms"])
    assert remote["driver.network.delay_ms"] == delay_ms
    assert remote["driver.network.relay"] == (1.0 if mechanism == "relay" else 0.0)
    assert remote["driver.network.netem"] == (1.0 if mechanism == "netem" else 0.0)
    if mechanism == "relay":
        assert remote["driver.relay_cpu_s"] > 0
    runs = {r["id"]: r for r in Store.open(out).runs()}
    # the host's own condition (noisy-host, cpu-saturated) is measured, not set by the link
    host_flags = {"noisy-host", "cpu-saturated"}
    assert [f for f in runs[1]["flags"] if f not in host_flags] == []
    assert [f for f in runs[2]["flags"] if f not in host_flags] == ["shaped-link"]
    [event] = [e for e in Store.open(out).events(2) if e["kind"] == "network"]
    assert ("perflab's relay" if mechanism == "relay" else "by netem") in event["message"]
    assert _leftovers_of_this_test(namespaces_as_found) == []
    # The report says which mechanism shaped the link, beside the figures.
    run_cli("report", out)
    html = (out / "report.html").read_text()
    assert "shaped-link" in html and ("delay relay (delay, jitter)" in html if mechanism == "relay" else
                                      "netem (delay" in html)


def _start(workdir: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path, set[str]]:
    """The run, its output directory, and the namespace and device it made
    (from its journal: another experiment's are never among them)."""
    experiment = _experiment(workdir, '{ namespace = true, delay = "1ms" }', duration="120s")
    out = workdir / "out"
    made: set[str] = set()

    def ready() -> bool:
        made.update(journaled_network_objects(out))
        return bool({m.split()[0] for m in made} >= {"netns", "link"} and set(netns.leftovers()) >= made
                    and list(out.glob("runs/001")) and postmasters_under(out))

    # Mid-run: the server is up and the driver is in the namespace (its run has begun).
    run = start_run_until(experiment, out, ready, env=env)
    time.sleep(2.0)
    return run, out, made


def _nothing_left(made: set[str], out: Path) -> list[str]:
    return sorted(set(netns.leftovers()) & made) + [f"server {pid}" for pid in postmasters_under(out)]


def test_ctrl_c_mid_run_removes_the_namespace(workdir: Path, namespaces_as_found: set[str]) -> None:
    run, out, made = _start(workdir)
    try:
        assert set(netns.leftovers()) >= made
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) != 0
        assert _nothing_left(made, out) == []
    finally:
        if run.poll() is None:
            run.kill()


def test_sigkill_mid_run_leaves_no_namespace_veth_or_qdisc(workdir: Path, namespaces_as_found: set[str],
                                                            run_cli) -> None:
    run, out, made = _start(workdir)
    try:
        assert any(m.startswith("netns ") for m in made) and any(m.startswith("link ") for m in made)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=30)
        deadline = time.monotonic() + GONE_WITHIN_S
        while _nothing_left(made, out) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _nothing_left(made, out) == []
        # A new start (here a check of another file) finds nothing left to undo.
        other = workdir / "other.toml"
        other.write_text('[experiment]\nname = "x"\n[target]\nkind = "duckdb"\n[workload]\nkind = "sql"\n'
                         'statements = ["SELECT 1"]\n')
        proc = run_cli("check", other)
        assert "left by a killed perflab" not in proc.stderr
        assert _nothing_left(made, out) == []
    finally:
        if run.poll() is None:
            run.kill()


@pytest.mark.parametrize(("network", "target", "expected"), [
    ('{ namespace = true, delay = "2ms" }', 'kind = "postgres"', 'set target.listen = "tcp"'),
    ('{ namespace = true }', 'kind = "duckdb"', "driver.network works with a managed postgres target"),
    ('{ namespace = true, delay = "1ms", jitter = "2ms" }', 'kind = "postgres"\nlisten = "tcp"', "jitter <= delay"),
    ('{ namespace = true, rate = "1gbps" }', 'kind = "postgres"\nlisten = "tcp"', '"1gbit"'),
    ('{ namespace = true, loss = "101%" }', 'kind = "postgres"\nlisten = "tcp"', "percentage"),
])
def test_a_network_perflab_cannot_make_is_a_clear_error(workdir: Path, run_cli, network: str, target: str,
                                                        expected: str) -> None:
    path = workdir / "bad.toml"
    workload = 'kind = "tpcb"' if "postgres" in target else 'kind = "sql"\nstatements = ["SELECT 1"]'
    path.write_text(f'[experiment]\nname = "x"\n[target]\n{target}\n[workload]\n{workload}\n'
                    f"[driver]\nnetwork = {network}\n")
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "driver.network" in proc.stderr and expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_loss_without_netem_is_refused_by_check(workdir: Path, run_cli) -> None:
    if netns.netem_status() is not False:
        pytest.skip("this kernel has netem (or does not say): loss is possible")
    path = workdir / "loss.toml"
    path.write_text('[experiment]\nname = "x"\n[target]\nkind = "postgres"\nlisten = "tcp"\n[workload]\n'
                    'kind = "tpcb"\n[driver]\nnetwork = { namespace = true, loss = "1%" }\n')
    proc = run_cli("check", path, check=False)
    assert proc.returncode == 2 and "CONFIG_NET_SCH_NETEM" in proc.stderr, proc.stderr


def test_without_root_or_ip_the_problem_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    found = netns.problems()
    assert any("need root" in p for p in found) and any("install iproute2" in p for p in found)
