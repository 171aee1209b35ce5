"""The runner's side of driver.network: a client in a namespace of its own.

One namespace per experiment (made when the first run that wants it starts,
kept to the end: the server listens on its link for the whole experiment, so
local and namespaced runs share one server), joined to the root namespace by
a veth pair:

    root namespace                           perflab-TAG-driver
    server on 127.0.0.1 and 198.18.x.1  <->  198.18.x.2  driver (and relay)
    [perflabTAGh, shaped]                    [perflabTAGd, shaped]

Each run with namespace = true shapes both ends for its settings, and the
workload's measured part runs with perflab's main thread inside the namespace
(`netns.entered`), so the engine's driver threads open their sockets there.
The link is shaped by netem where the kernel has it (delay, jitter, loss,
rate); else by tbf (rate) and perflab's delay relay (delay, jitter), started
inside the namespace between the driver and the server. Which ran is an event
of the run, the metrics `driver.network.*` and the flag `shaped-link`; the
relay's CPU is added to the driver's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from perflab import _engine
from perflab.endpoints import Endpoint
from perflab.errors import RunFailure
from perflab.hostctl import netns
from perflab.hostctl.netns import DriverNetwork
from perflab.model import Event, Flag, RunResult
from perflab.targets.base import Target


class DriverLink:
    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.tag: str | None = None
        self.ns = ""
        self.link: netns.Link | None = None
        self.netem: bool | None = None  # learnt at the first shaped run

    @property
    def made(self) -> bool:
        return self.link is not None

    def make(self) -> None:
        if self.link is not None:
            return
        self.tag = netns.new_tag()
        self.ns = f"{netns.PREFIX}-{self.tag}-driver"
        try:
            netns.create_netns(self.ns)
            self.link = netns.create_veth(f"{netns.PREFIX}{self.tag}h", None, f"{netns.PREFIX}{self.tag}d", self.ns,
                                          netns.free_subnets(1)[0])
        except Exception as exc:
            self.remove()
            raise RunFailure(f"driver.network: cannot make the namespace: {exc}") from None
        self.say(f"driver namespace {self.ns}: {self.link.b.v4.ip} -> server at {self.link.a.v4.ip}")

    @property
    def server_address(self) -> str:
        assert self.link is not None
        return str(self.link.a.v4.ip)

    @property
    def client_address(self) -> str:
        assert self.link is not None
        return str(self.link.b.v4.ip)

    def remove(self) -> None:
        if self.tag is None:
            return
        if self.link is not None:
            netns.delete_link(self.link.a.dev)
        netns.delete_netns(self.ns)
        self.link = None
        self.tag = None

    def _mechanism(self, net: DriverNetwork) -> bool:
        """Whether this run uses netem (else tbf and the relay)."""
        assert self.link is not None
        if net.mechanism == "relay":
            return False
        if self.netem is None:
            known = netns.netem_status()
            self.netem = netns.try_netem(self.link.b) if known is None else known
        if not self.netem and (net.mechanism == "netem" or net.loss > 0):
            raise RunFailure("driver.network: netem is not in this kernel (CONFIG_NET_SCH_NETEM); "
                             "use mechanism = \"auto\" with loss = \"0%\"")
        return self.netem

    @contextlib.contextmanager
    def driving(self, net: DriverNetwork, target: Target, endpoint: Endpoint, result: RunResult,
                now: Callable[[], float]) -> Iterator[Endpoint]:
        """Shape the link for this run, start the relay if needed, and hold
        this thread inside the namespace; yields the endpoint the driver uses."""
        assert self.link is not None
        port = endpoint.tcp_port()
        if port is None:
            raise RunFailure("driver.network: the target has no TCP port")
        netem = self._mechanism(net)
        how = net.shape()
        for end in (self.link.a, self.link.b):
            netns.shape(end, how, netem)
        relay: _engine.DelayRelay | None = None
        with netns.entered(self.ns):
            try:
                if not netem and (net.delay or net.jitter):
                    relay = _engine.DelayRelay("127.0.0.1:0", f"{self.server_address}:{port}",
                                               net.delay, net.jitter, seed=1)
                    driver_endpoint = target.remote_endpoint(endpoint, "127.0.0.1", relay.port)
                else:
                    driver_endpoint = target.remote_endpoint(endpoint, self.server_address, port)
                delay_by = "netem" if netem else "perflab's relay" if relay is not None else "none"
                rate_by = ("netem" if netem else "tbf") if net.rate else "none"
                result.events.append(Event(now(), "network", (
                    f"driver in namespace {self.ns} over veth to {self.server_address}:{port}; "
                    f"delay {net.delay * 1e3:g} ms ± {net.jitter * 1e3:g} ms each way by {delay_by}, "
                    f"rate {_rate(net.rate)} by {rate_by}, loss {net.loss:g}%"
                    + ("" if netem else " (this kernel has no netem)"))))
                yield driver_endpoint
            finally:
                relay_stats = relay.stop() if relay is not None else None
        for end in (self.link.a, self.link.b):
            netns.run(["tc", "qdisc", "del", "dev", end.dev, "root"], ns=end.ns, check=False)
        result.add_metric("driver.network.delay_ms", net.delay * 1e3, "ms", "configured one-way delay, each direction")
        result.add_metric("driver.network.jitter_ms", net.jitter * 1e3, "ms", "configured jitter, each direction")
        if net.rate:
            result.add_metric("driver.network.rate_mbit", net.rate / 1e6, "Mbit/s", "configured link rate")
        result.add_metric("driver.network.netem", 1.0 if netem else 0.0, "bool",
                          "1: netem shaped the link; 0: tbf (rate) and perflab's delay relay (delay)")
        result.add_metric("driver.network.relay", 1.0 if relay is not None else 0.0, "bool",
                          "1: perflab's delay relay held each chunk for the delay")
        if relay_stats is not None:
            cpu = relay_stats["cpu_s"]
            result.add_metric("driver.relay_cpu_s", cpu, "s",
                              "CPU time of the delay relay's threads over the whole run (counted in driver_cpu_s too)")
            # The driver's CPU figures include the relay's: scale each by (driver + relay) / driver.
            base = next((m.value for n, m in result.metrics.items() if n.endswith("driver_cpu_s")), None)
            for name, metric in list(result.metrics.items()):
                if base and name.rsplit(".", 1)[-1] in ("driver_cpu_s", "driver_cpu_per_tx_us", "driver_cpu_share"):
                    result.add_metric(name, metric.value * (base + cpu) / base, metric.unit,
                                      metric.description + ", with the delay relay's threads",
                                      metric.higher_is_better, metric.method)
        if Flag.SHAPED_LINK not in result.flags:
            result.flags.append(Flag.SHAPED_LINK)


def _rate(bps: float | None) -> str:
    if not bps:
        return "unlimited"
    return f"{bps / 1e9:g} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:g} Mbit/s"
