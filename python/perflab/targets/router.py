"""A Linux router in network namespaces: the netfilter study's testbed on one machine.

    client ns                router ns                  server ns
    [perflabTAGc] <-veth-> [perflabTAGr] [perflabTAGs] <-veth-> [perflabTAGv]
    198.18.a.2             198.18.a.1    198.18.b.1             198.18.b.2

Three namespaces (names unique to the experiment, prefix "perflab"), two
veth pairs, IPv4 from 198.18.0.0/15 (RFC 2544's benchmarking range) and
IPv6 from fd00::/8 (unique-local), routes through the router, forwarding on
in the router only (its own sysctls: the host's are not touched). The rule
set (`rules`, perflab.hostctl.netfilter) sits on the router's forward hook.
GRO/GSO/TSO (`offloads`) are set on every veth end with ethtool and
recorded: with them on, a veth passes 64 KiB super-packets and the router
sees far fewer "frames" than the wire would carry.

Every namespace is journaled before it exists (perflab.hostctl.netns): the
guardian removes them after a SIGKILL, and with them the veths and rules.
A change of rules or offloads between runs is applied in place; the rules'
install time is stored with each run (the control plane's cost).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from perflab.endpoints import Capability, Endpoint
from perflab.errors import RunFailure
from perflab.hostctl import netfilter, netns
from perflab.hostctl.netfilter import RuleSettings
from perflab.model import SETUP_IGNORES
from perflab.targets.base import Target, TargetSettings

ROLES = ("client", "router", "server")


class RouterSettings(TargetSettings):
    kind: Literal["router"]
    # The firewall rules every forwarded packet crosses on the router (count, type, backend).
    rules: RuleSettings = Field(default_factory=RuleSettings)
    # GRO, GSO and TSO on every veth end (ethtool -K).
    offloads: bool = True
    # The MTU of every veth link (jumbo frames up to 9000).
    mtu: int = Field(default=1500, ge=1280, le=9000)


@dataclass(kw_only=True)
class NetworkEndpoint(Endpoint):
    """Two namespaces with a router between them: a sender's and a receiver's."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.NETWORK})

    client_ns: str
    server_ns: str
    router_ns: str
    server_v4: str
    server_v6: str
    # the router's device towards the server: its tx counters are what it forwarded
    router_out_dev: str
    mtu: int
    # family -> packets the router's final counting rule has accepted so far
    rules_passed: Callable[[str], int] | None = field(default=None, repr=False)
    # the rule set in place now: its settings and how long its install took
    rules_now: Callable[[], tuple[RuleSettings, float | None]] | None = field(default=None, repr=False)

    def display(self) -> str:
        return f"router {self.router_ns}: {self.client_ns} -> {self.server_ns}"

    def server_address(self, family: str) -> str:
        return self.server_v4 if family == "ipv4" else self.server_v6


def _mac(end: netns.LinkEnd) -> str:
    out = netns.run(["ip", "-j", "link", "show", "dev", end.dev], ns=end.ns).stdout
    return str(json.loads(out)[0]["address"])


def _static_neighbours(link: netns.Link) -> None:
    """Permanent ARP and NDP entries on both ends, as a router tester's static
    ARP: under a flood, neighbour discovery's own packets can be lost, and a
    FAILED entry then drops everything for seconds."""
    for here, there in ((link.a, link.b), (link.b, link.a)):
        mac = _mac(there)
        for addr in (there.v4.ip, there.v6.ip):
            netns.run(["ip", "neigh", "replace", str(addr), "lladdr", mac, "dev", here.dev, "nud", "permanent"],
                      ns=here.ns)


class RouterTarget(Target[RouterSettings, NetworkEndpoint]):
    Settings: ClassVar[type[TargetSettings]] = RouterSettings
    endpoint_type: ClassVar[type[Endpoint]] = NetworkEndpoint


    def __init__(self, settings: RouterSettings, workdir: Path, base_dir: Path | None = None) -> None:
        super().__init__(settings, workdir, base_dir)
        self.tag: str | None = None
        self.names: dict[str, str] = {}
        self.links: list[netns.Link] = []
        self.endpoint: NetworkEndpoint | None = None
        self.install_s: float | None = None
        self.applied: tuple[str, bool] | None = None  # (rules json, offloads) in place

    @classmethod
    def identity(cls, settings: RouterSettings) -> str:
        # Rules and offloads change in place: one set of namespaces serves every run.
        return f"router:mtu={settings.mtu}"

    @classmethod
    def preflight(cls, settings: RouterSettings, base_dir: Path) -> list[tuple[str, str]]:
        out = [("target.kind", p) for p in netns.problems(("ip", "ethtool"))]
        return out + netfilter.rules_problems(settings.rules)

    def provision(self) -> NetworkEndpoint:
        problems = netns.problems(("ip", "ethtool"))
        if problems:
            raise RunFailure("router: " + "; ".join(problems))
        self.tag = tag = netns.new_tag()
        self.names = {role: f"{netns.PREFIX}-{tag}-{role}" for role in ROLES}
        try:
            for role in ROLES:
                netns.create_netns(self.names[role])
            c, r, s = (self.names[x] for x in ROLES)
            left, right = netns.free_subnets(2)
            # router end first (.1), so it is each side's gateway
            a = netns.create_veth(f"perflab{tag}r", r, f"perflab{tag}c", c, left)
            b = netns.create_veth(f"perflab{tag}s", r, f"perflab{tag}v", s, right)
            self.links = [a, b]
            for link in self.links:
                for end in (link.a, link.b):
                    netns.run(["ip", "link", "set", end.dev, "mtu", str(self.settings.mtu)], ns=end.ns)
            for ns, gw4, gw6 in ((c, a.a.v4.ip, a.a.v6.ip), (s, b.a.v4.ip, b.a.v6.ip)):
                netns.run(["ip", "route", "add", "default", "via", str(gw4)], ns=ns)
                netns.run(["ip", "-6", "route", "add", "default", "via", str(gw6)], ns=ns)
            netns.run(["sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"], ns=r)
            for link in self.links:
                _static_neighbours(link)
            self._apply()
        except Exception as exc:
            self.teardown()
            raise RunFailure(f"router: {exc}") from None
        self.endpoint = NetworkEndpoint(
            read_only=False, fresh=True, client_ns=c, server_ns=s, router_ns=r,
            server_v4=str(b.b.v4.ip), server_v6=str(b.b.v6.ip), router_out_dev=b.a.dev, mtu=self.settings.mtu,
            rules_passed=self.rules_passed, rules_now=lambda: (self.settings.rules, self.install_s))
        return self.endpoint

    def _apply(self) -> None:
        """The run's offloads and rules, in place."""
        want = (self.settings.rules.model_dump_json(), self.settings.offloads)
        if self.applied == want:
            return
        if self.applied is None or self.applied[1] != self.settings.offloads:
            state = "on" if self.settings.offloads else "off"
            for link in self.links:
                for end in (link.a, link.b):
                    netns.run(["ethtool", "-K", end.dev, "gro", state, "gso", state, "tso", state], ns=end.ns)
        try:
            self.install_s = netfilter.install(self.names["router"], self.settings.rules)
        except (RuntimeError, subprocess.SubprocessError) as exc:
            raise RunFailure(f"router: rules: {exc}") from None
        self.applied = want

    def reconfigure(self, settings: RouterSettings) -> bool:
        self.settings = settings
        self._apply()
        return False

    def teardown(self) -> None:
        for role in ROLES[::-1]:
            if role in self.names:
                netns.delete_netns(self.names[role])
        self.names = {}
        self.links = []
        self.applied = None

    def describe(self) -> dict[str, Any]:
        r = self.settings.rules
        return {
            "kind": "router",
            "namespaces": dict(self.names),
            "rules": {"count": r.count, "type": r.type, "backend": r.backend,
                      "install_s": self.install_s},
            "offloads": {"gro": self.settings.offloads, "gso": self.settings.offloads,
                         "tso": self.settings.offloads},
            "mtu": self.settings.mtu,
            "kernel": os.uname().release,
            # keys above that are no part of the set-up: the namespaces' names
            # and the rules' install time, and with no rules their type (the
            # report pools such runs as one set-up: its noise floor)
            SETUP_IGNORES: ["namespaces", "rules.install_s", *(["rules.type"] if r.count == 0 else [])],
        }

    def check_alive(self) -> str | None:
        missing = [n for n in self.names.values() if not (netns.NETNS_DIR / n).exists()]
        return f"namespaces gone: {', '.join(missing)}" if missing else None

    def rules_passed(self, family: str) -> int:
        return netfilter.passed(self.names["router"], self.settings.rules, family)
