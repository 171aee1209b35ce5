"""Firewall rule sets on a router namespace's forward hook (`target.rules`).

    rules = { count = 1000, type = "nomatch-address", backend = "nft" }

- `nomatch-address`: `count` rules matching a source address no packet has
  (240.0.0.0/4, reserved; fd00:dead::/32 for IPv6), each dropping: every
  forwarded packet is compared with every one, as in the netfilter study
  (arXiv 1502.05487), so the cost is `count` rule evaluations;
- `nomatch-port`: `count` rules on destination ports 1..count (TCP and UDP in
  turn), which perflab's flows never use (theirs are ephemeral);
- `set`: one rule looking the source address up in a `count`-element set:
  nftables' answer to linear scans (nft only).

Each family gets its own `count` rules (iptables and ip6tables; nft tables
`ip` and `ip6`), so IPv4 and IPv6 traffic cross the same number. The chain
ends in a counting accept rule: its packet count proves the traffic went
through the whole list. Rules are installed atomically (iptables-restore,
`nft -f`), the install timed (the control plane's cost), and the count read
back. They live in the router's namespace and go with it: nothing of them
touches the host's own tables.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import time
from typing import Any, Literal

from pydantic import Field

from perflab.hostctl import netns
from perflab.settings_model import StrictModel

MAX_RULES = 100_000
RuleType = Literal["nomatch-address", "nomatch-port", "set"]
Backend = Literal["iptables-legacy", "iptables-nft", "nft"]
FAMILIES = ("ipv4", "ipv6")
V4_BASE = int(ipaddress.IPv4Address("240.0.0.1"))
V6_BASE = int(ipaddress.IPv6Address("fd00:dead::1"))


class RuleSettings(StrictModel):
    # Rules per address family on the router's forward hook.
    count: int = Field(default=0, ge=0, le=MAX_RULES)
    # "nomatch-address": rules on a source no packet has; "nomatch-port": on ports no flow uses; "set": one
    # lookup in a set of count addresses (nft only).
    type: RuleType = "nomatch-address"
    # The tool that installs them: nft, or iptables (legacy or nft).
    backend: Backend = "nft"


def _tools(backend: Backend) -> list[str]:
    if backend == "nft":
        return ["nft"]
    flavour = backend.split("-")[1]
    return [f"iptables-{flavour}-restore", f"ip6tables-{flavour}-restore", f"iptables-{flavour}-save",
            f"ip6tables-{flavour}-save"]


def rules_problems(rules: RuleSettings) -> list[tuple[str, str]]:
    """What would stop the install, found without changing anything."""
    out = []
    if rules.type == "set" and rules.backend != "nft":
        out.append(("target.rules.type", f"\"set\" is nftables' own; got backend {rules.backend!r}; "
                    "allowed: backend = \"nft\" with type = \"set\""))
    missing = [t for t in _tools(rules.backend) if shutil.which(t) is None]
    if missing:
        pkg = "nftables" if rules.backend == "nft" else "iptables"
        out.append(("target.rules.backend", f"{rules.backend}: {', '.join(missing)} not found; install {pkg} "
                    f"(Debian: apt-get install {pkg}; `./dev setup` does)"))
    return out


def _address(family: str, i: int) -> str:
    return str(ipaddress.IPv4Address(V4_BASE + i) if family == "ipv4" else ipaddress.IPv6Address(V6_BASE + i))


def iptables_text(rules: RuleSettings, family: str) -> str:
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    for i in range(rules.count):
        if rules.type == "nomatch-address":
            lines.append(f"-A FORWARD -s {_address(family, i)} -j DROP")
        else:
            proto = "tcp" if i % 2 == 0 else "udp"
            lines.append(f"-A FORWARD -p {proto} --dport {i % 32000 + 1} -j DROP")
    lines += ["-A FORWARD -j ACCEPT", "COMMIT", ""]
    return "\n".join(lines)


def nft_text(rules: RuleSettings) -> str:
    parts = []
    for family, table, match in (("ipv4", "ip", "ip saddr"), ("ipv6", "ip6", "ip6 saddr")):
        body = []
        if rules.type == "set" and rules.count:
            kind = "ipv4_addr" if family == "ipv4" else "ipv6_addr"
            elements = ", ".join(_address(family, i) for i in range(rules.count))
            body.append(f"  set perflab_nomatch {{ type {kind}; elements = {{ {elements} }} }}")
        body.append("  chain forward {")
        body.append("    type filter hook forward priority 0; policy accept;")
        if rules.type == "set" and rules.count:
            body.append(f"    {match} @perflab_nomatch drop")
        else:
            for i in range(rules.count):
                if rules.type == "nomatch-address":
                    body.append(f"    {match} {_address(family, i)} drop")
                else:
                    proto = "tcp" if i % 2 == 0 else "udp"
                    body.append(f"    {proto} dport {i % 32000 + 1} drop")
        body.append("    counter accept")
        body.append("  }")
        # add, delete, define: replaces the table atomically whether or not it exists
        parts.append(f"table {table} perflab\ndelete table {table} perflab\ntable {table} perflab {{\n"
                     + "\n".join(body) + "\n}")
    return "\n".join(parts) + "\n"


# A rule set of 100,000 rules takes a while to load: more than netns.run's default.
INSTALL_TIMEOUT_S = 600


def _run(ns: str, args: list[str], stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    return netns.run(args, ns=ns, check=check, stdin=stdin, timeout=INSTALL_TIMEOUT_S)


def clear(ns: str) -> None:
    """No rule of any backend in namespace `ns` (a backend may be absent)."""
    for tool in ("iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft"):
        if shutil.which(tool):
            _run(ns, [tool, "-F", "FORWARD"], check=False)
    if shutil.which("nft"):
        _run(ns, ["nft", "flush", "ruleset"], check=False)


def install(ns: str, rules: RuleSettings) -> float:
    """Replace every rule in `ns` with `rules`; the seconds the install took
    (the atomic load of both families), after checking what the kernel holds."""
    clear(ns)
    started = time.perf_counter()
    if rules.backend == "nft":
        _run(ns, ["nft", "-f", "-"], stdin=nft_text(rules))
    else:
        flavour = rules.backend.split("-")[1]
        _run(ns, [f"iptables-{flavour}-restore"], stdin=iptables_text(rules, "ipv4"))
        _run(ns, [f"ip6tables-{flavour}-restore"], stdin=iptables_text(rules, "ipv6"))
    seconds = time.perf_counter() - started
    for family in FAMILIES:
        got = installed(ns, rules, family)
        if got != rules.count:
            raise RuntimeError(f"{rules.backend} holds {got} {family} rules or set elements in {ns}; "
                               f"installed {rules.count}")
    return seconds


def _nft_json(ns: str) -> list[dict[str, Any]]:
    out = json.loads(_run(ns, ["nft", "-j", "list", "ruleset"]).stdout)
    return [item for item in out.get("nftables", []) if isinstance(item, dict)]


def installed(ns: str, rules: RuleSettings, family: str) -> int:
    """The rules (or set elements) before the final counting rule, as the kernel reports them."""
    if rules.backend == "nft":
        table = "ip" if family == "ipv4" else "ip6"
        items = _nft_json(ns)
        if rules.type == "set":
            for item in items:
                s = item.get("set")
                if isinstance(s, dict) and s.get("family") == table and s.get("name") == "perflab_nomatch":
                    return len(s.get("elem", []))  # type: ignore[arg-type]
            return 0
        rules_ = [item["rule"] for item in items if isinstance(item.get("rule"), dict)]
        n = sum(1 for r in rules_ if r.get("family") == table and r.get("table") == "perflab")  # type: ignore[attr-defined]
        return max(0, n - 1)
    flavour = rules.backend.split("-")[1]
    tool = f"{'ip6' if family == 'ipv6' else 'ip'}tables-{flavour}-save"
    text = _run(ns, [tool, "-t", "filter"]).stdout
    return max(0, len(re.findall(r"^-A FORWARD ", text, re.M)) - 1)


def passed(ns: str, rules: RuleSettings, family: str) -> int:
    """Packets the final counting rule accepted: they crossed every rule before it."""
    if rules.backend == "nft":
        table = "ip" if family == "ipv4" else "ip6"
        for item in _nft_json(ns):
            rule = item.get("rule")
            if isinstance(rule, dict) and rule.get("family") == table and rule.get("table") == "perflab":
                for expr in rule.get("expr", []):
                    if isinstance(expr, dict) and "counter" in expr:
                        return int(expr["counter"]["packets"])
        return 0
    flavour = rules.backend.split("-")[1]
    tool = f"{'ip6' if family == 'ipv6' else 'ip'}tables-{flavour}-save"
    text = _run(ns, [tool, "-c", "-t", "filter"]).stdout
    m = re.search(r"^\[(\d+):\d+\] -A FORWARD -j ACCEPT$", text, re.M)
    return int(m.group(1)) if m else 0
