"""Network namespaces, veth pairs and link shaping that perflab makes.

A namespace gives a client (or a router, or a server) its own network stack
on this machine: its traffic crosses a veth pair, a real TCP/IP path with
its own queues, which tc can shape. Everything here follows the hostctl rule,
journaled before it is made:

- a namespace: kind "netns", key f"netns:{name}"; its undo SIGKILLs what
  still runs inside (`ip netns pids`) and deletes it, which deletes every
  device in it, and the other end of each veth pair with it;
- a veth pair with an end in this (the root) namespace: kind "link", key
  f"link:{name}" on that end; its undo is `ip link del` (a qdisc on it goes
  with it).

Names start with "perflab" and carry a tag unique to the experiment (device
names have at most 15 characters: "perflab" + 4 hex digits + a role suffix).

Addresses come from 198.18.0.0/15, the range RFC 2544 sets aside for
benchmarking, and fd00::/8, unique-local: neither reaches the internet. A /30
(or /126) per link, picked among those no interface of this machine uses.

Shaping: netem (delay, jitter, loss, rate) where the kernel has it; else tbf
for the rate, and the delay left to the caller (perflab's delay relay,
`perflab._engine.DelayRelay`). `netem_status()` reads the kernel's build
configuration (/proc/config.gz, /boot/config-*), which says for certain
whether CONFIG_NET_SCH_NETEM is there; without one, `shape()` tries netem on
perflab's own device and falls back, and says which ran.
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from perflab.errors import UserError
from perflab.guardian import journal, register_undo
from perflab.settings_model import StrictModel
from perflab.units import Duration

PREFIX = "perflab"
NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
V4_POOL = ipaddress.IPv4Network("198.18.0.0/15")
V6_POOL = ipaddress.IPv6Network("fd70:6572:666c:6162::/64")  # "perflab" in its bytes


# --------------------------------------------------------------- preflight


def problems(tools: tuple[str, ...] = ("ip", "tc")) -> list[str]:
    """What stops perflab from making namespaces here (nothing is changed)."""
    out = []
    if os.geteuid() != 0:
        out.append("network namespaces and veth pairs need root; run perflab as root (sudo)")
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        out.append(f"{', '.join(missing)} not found; install iproute2 (Debian: apt-get install iproute2)")
    return out


def kernel_config() -> dict[str, str] | None:
    """The running kernel's build configuration, when it says (CONFIG_X -> y/m/n)."""
    sources: list[tuple[Path, bool]] = [(Path("/proc/config.gz"), True),
                                        (Path(f"/boot/config-{os.uname().release}"), False)]
    for path, zipped in sources:
        try:
            text = gzip.decompress(path.read_bytes()).decode() if zipped else path.read_text()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        config = {}
        for line in text.splitlines():
            if m := re.match(r"(CONFIG_\w+)=(\S+)", line):
                config[m.group(1)] = m.group(2)
            elif m := re.match(r"# (CONFIG_\w+) is not set", line):
                config[m.group(1)] = "n"
        return config
    return None


def netem_status() -> bool | None:
    """True/False when the kernel's configuration says whether it has netem;
    None when there is no configuration to read (try it)."""
    config = kernel_config()
    if config is None:
        return None
    return config.get("CONFIG_NET_SCH_NETEM", "n") in ("y", "m")


# --------------------------------------------------------------- commands


def run(args: list[str], ns: str | None = None, check: bool = True, stdin: str | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """One ip/tc/sysctl/iptables/nft command, in namespace `ns` when given,
    `stdin` fed to it. A failure raises RuntimeError with the command's words."""
    cmd = (["ip", "netns", "exec", ns] if ns else []) + args
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc


def new_tag() -> str:
    """4 hex digits no namespace or device of this machine uses yet."""
    taken = set(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else set()
    taken |= set(os.listdir("/sys/class/net"))
    for _ in range(100):
        tag = secrets.token_hex(2)
        if not any(tag in name for name in taken if name.startswith(PREFIX)):
            return tag
    raise RuntimeError("no free perflab namespace tag after 100 tries")


def _used_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    proc = run(["ip", "-o", "addr", "show"], check=False)
    nets: list[Any] = []
    for m in re.finditer(r"\binet6? (\S+)", proc.stdout):
        with contextlib.suppress(ValueError):
            nets.append(ipaddress.ip_interface(m.group(1)).network)
    return nets


def free_subnets(count: int) -> list[tuple[ipaddress.IPv4Network, ipaddress.IPv6Network]]:
    """`count` links' worth of (/30, /126) that no interface here overlaps;
    from a random start, so two experiments rarely even try the same one."""
    used = _used_networks()
    v4 = list(V4_POOL.subnets(new_prefix=30))
    start = secrets.randbelow(len(v4))
    out: list[tuple[ipaddress.IPv4Network, ipaddress.IPv6Network]] = []
    for i in range(len(v4)):
        n4 = v4[(start + i) % len(v4)]
        if any(n4.overlaps(u) for u in used if u.version == 4):
            continue
        n6 = ipaddress.IPv6Network((int(V6_POOL.network_address) + (((start + i) % len(v4)) << 2), 126))
        if any(n6.overlaps(u) for u in used if u.version == 6):
            continue
        out.append((n4, n6))
        if len(out) == count:
            return out
    raise RuntimeError("no free /30 left in 198.18.0.0/15")


# --------------------------------------------------------------- objects


def undo_netns(args: dict[str, Any]) -> None:
    name = args["name"]
    if not isinstance(name, str) or not name.startswith(PREFIX) or "/" in name:
        return  # not a namespace perflab could have made: a journal is evidence, not an order
    proc = run(["ip", "netns", "pids", name], check=False)
    for pid in proc.stdout.split():
        if pid == str(os.getpid()):
            continue  # perflab itself, with a thread still inside: deleting the name is enough
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    run(["ip", "netns", "del", name], check=False)


register_undo("netns", undo_netns)  # a network namespace: kill what runs in it, delete it


def undo_link(args: dict[str, Any]) -> None:
    name = args["name"]
    if not isinstance(name, str) or not name.startswith(PREFIX) or "/" in name:
        return  # not a device perflab could have made
    if Path("/sys/class/net", name).exists():
        run(["ip", "link", "del", args["name"]], check=False)


register_undo("link", undo_link)  # a veth end in the root namespace: delete it (and its qdisc)


class NameTaken(RuntimeError):
    """A namespace or device of that name exists already: another perflab's
    (two picked the same tag) or anyone's. It is not ours, so it is left alone."""


# What this process made (and has not deleted): delete_netns and delete_link
# touch nothing else, whatever name they are given.
_MADE: set[str] = set()


def _netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def create_netns(name: str) -> None:
    """A namespace with its loopback up; journaled before it exists. A name
    that is taken raises NameTaken and is never undone: what already had
    that name is someone else's."""
    if _netns_exists(name):
        raise NameTaken(f"network namespace {name} exists already (not made by this perflab)")
    journal().add("netns", f"netns:{name}", name=name)
    try:
        proc = run(["ip", "netns", "add", name], check=False)
        if proc.returncode != 0:
            # Taken between the look and the add: withdrawn, not undone.
            journal().remove(f"netns:{name}")
            raise (NameTaken if "exists" in proc.stderr.lower() else RuntimeError)(
                f"ip netns add {name}: {(proc.stderr or proc.stdout).strip()[-400:]}")
        _MADE.add(f"netns {name}")
        run(["ip", "link", "set", "lo", "up"], ns=name)
    except NameTaken:
        raise
    except Exception:
        delete_netns(name)
        raise


def delete_netns(name: str) -> None:
    """Delete a namespace this process made (any other name: nothing is done)."""
    if f"netns {name}" in _MADE:
        undo_netns({"name": name})
        _MADE.discard(f"netns {name}")
    journal().remove(f"netns:{name}")


@dataclass(frozen=True)
class LinkEnd:
    dev: str
    ns: str | None  # None: the root namespace
    v4: ipaddress.IPv4Interface
    v6: ipaddress.IPv6Interface


@dataclass(frozen=True)
class Link:
    a: LinkEnd
    b: LinkEnd


def create_veth(a_dev: str, a_ns: str | None, b_dev: str, b_ns: str | None,
                nets: tuple[ipaddress.IPv4Network, ipaddress.IPv6Network]) -> Link:
    """A veth pair between two namespaces (None: root), addressed .1 on `a`
    and .2 on `b`, both up. The root end, if any, is journaled."""
    root_end = a_dev if a_ns is None else b_dev if b_ns is None else None
    # Both ends are made in this namespace before they move: a name taken here
    # is someone else's device, never to be deleted as ours.
    taken = [d for d in (a_dev, b_dev) if _link_exists(d)]
    if taken:
        raise NameTaken(f"network device {', '.join(taken)} exists already (not made by this perflab)")
    if root_end is not None:
        journal().add("link", f"link:{root_end}", name=root_end)
    n4, n6 = nets
    hosts4, hosts6 = list(n4.hosts()), [n6.network_address + 1, n6.network_address + 2]
    ends = (LinkEnd(a_dev, a_ns, ipaddress.IPv4Interface(f"{hosts4[0]}/30"), ipaddress.IPv6Interface(f"{hosts6[0]}/126")),
            LinkEnd(b_dev, b_ns, ipaddress.IPv4Interface(f"{hosts4[1]}/30"), ipaddress.IPv6Interface(f"{hosts6[1]}/126")))
    added = run(["ip", "link", "add", a_dev, "type", "veth", "peer", "name", b_dev], check=False)
    if added.returncode != 0:
        if root_end is not None:
            journal().remove(f"link:{root_end}")  # nothing was made: withdrawn, not undone
        raise (NameTaken if "exists" in added.stderr.lower() else RuntimeError)(
            f"ip link add {a_dev}: {(added.stderr or added.stdout).strip()[-400:]}")
    _MADE.update((f"link {a_dev}", f"link {b_dev}"))
    try:
        for end in ends:
            if end.ns is not None:
                run(["ip", "link", "set", end.dev, "netns", end.ns])
            # nodad: the address is usable at once (duplicate detection takes ~1 s)
            run(["ip", "addr", "add", str(end.v4), "dev", end.dev], ns=end.ns)
            run(["ip", "-6", "addr", "add", str(end.v6), "dev", end.dev, "nodad"], ns=end.ns)
            run(["ip", "link", "set", end.dev, "up"], ns=end.ns)
    except Exception:
        if root_end is not None:
            undo_link({"name": root_end})
            journal().remove(f"link:{root_end}")
        raise
    return Link(*ends)


def delete_link(dev: str) -> None:
    """Delete a veth pair (by either end) this process made; any other name: nothing is done."""
    if f"link {dev}" in _MADE:
        undo_link({"name": dev})
        _MADE.discard(f"link {dev}")
    journal().remove(f"link:{dev}")


# --------------------------------------------------------------- shaping


@dataclass(frozen=True)
class Shape:
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss_pct: float = 0.0
    rate_bps: float | None = None  # bits per second


def _tc_time(seconds: float) -> str:
    return f"{round(seconds * 1e6)}us"


def shape(end: LinkEnd, how: Shape, netem: bool) -> str:
    """Shape what leaves `end` (so both ends, for both directions). With
    netem: delay, jitter, loss and rate by netem. Without: the rate by tbf,
    nothing else (the delay is the relay's). Returns what ran, for the record."""
    dev, ns = end.dev, end.ns
    run(["tc", "qdisc", "del", "dev", dev, "root"], ns=ns, check=False)
    if netem:
        args = ["tc", "qdisc", "add", "dev", dev, "root", "netem", "limit", "100000"]
        if how.delay_s or how.jitter_s:
            args += ["delay", _tc_time(how.delay_s)] + ([_tc_time(how.jitter_s)] if how.jitter_s else [])
        if how.loss_pct:
            args += ["loss", f"{how.loss_pct}%"]
        if how.rate_bps:
            args += ["rate", f"{int(how.rate_bps)}bit"]
        run(args, ns=ns)
        return "netem"
    if how.rate_bps:
        # burst: at least 10 ms at the rate, and two 64 KiB GSO segments, which
        # tbf must take whole; latency bounds the queue.
        burst = max(int(how.rate_bps / 8 / 100), 2 * 65536 + 2048)
        run(["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{int(how.rate_bps)}bit",
             "burst", str(burst), "latency", "50ms"], ns=ns)
        return "tbf"
    return "none"


def try_netem(end: LinkEnd) -> bool:
    """Whether a netem qdisc can be added here (on perflab's own device)."""
    ok = run(["tc", "qdisc", "add", "dev", end.dev, "root", "netem", "delay", "0us"], ns=end.ns, check=False)
    run(["tc", "qdisc", "del", "dev", end.dev, "root"], ns=end.ns, check=False)
    return ok.returncode == 0


def qdiscs(end: LinkEnd) -> str:
    return run(["tc", "qdisc", "show", "dev", end.dev], ns=end.ns, check=False).stdout


# --------------------------------------------------------------- entering


_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Move the calling thread (only it) into namespace `name`, and back at
    the end. Sockets it opens meanwhile, and threads it starts (which take
    its namespace with them), live in `name`: so the engine's driver and its
    relay run there while the rest of perflab does not."""
    try:
        target = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UserError(f"network namespace {name} is gone", "run again; perflab makes it anew") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def leftovers() -> list[str]:
    """perflab's namespaces and devices on this machine now (tests, doctor)."""
    names = [f"netns {n}" for n in (os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else []) if n.startswith(PREFIX)]
    names += [f"link {n}" for n in os.listdir("/sys/class/net") if n.startswith(PREFIX)]
    return names


# --------------------------------------------------------------- settings

RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(bit|kbit|mbit|gbit|tbit)\s*$", re.I)
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate_bps(value: object) -> float:
    """"1gbit" -> 1e9 (tc's units, powers of 1000; bytes per second, tc's
    "bps", is not taken: too easily read as bits)."""
    m = RATE.match(str(value)) if isinstance(value, str) else None
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"got {value!r}; allowed: a rate such as \"100mbit\" or \"1gbit\" "
                         "(bit, kbit, mbit, gbit, tbit)")
    return float(m.group(1)) * RATE_UNITS[m.group(2).lower()]


def parse_percent(value: Any) -> float:
    text = value.strip().removesuffix("%") if isinstance(value, str) else value
    try:
        pct = float(text)
    except (TypeError, ValueError):
        pct = -1.0
    if not 0 <= pct <= 100 or isinstance(value, bool):
        raise ValueError(f"got {value!r}; allowed: a percentage from \"0%\" to \"100%\"")
    return pct


# A link's rate ("1gbit") and loss ("0.5%") as an experiment file writes them;
# the JSON Schema tells an editor the same (perflab schema).
Rate = Annotated[float, BeforeValidator(parse_rate_bps),
                 WithJsonSchema({"type": "string", "pattern": RATE.pattern, "format": "rate", "unit": "bit/s"})]
Percent = Annotated[float, BeforeValidator(parse_percent),
                    WithJsonSchema({"anyOf": [{"type": "number", "minimum": 0, "maximum": 100},
                                              {"type": "string", "pattern": r"^\s*[0-9.]+\s*%?\s*$"}]})]


class DriverNetwork(StrictModel):
    """[driver] network: the driver's connections leave from a namespace of
    perflab's own, over a veth pair, to the server on TCP; the link shaped.
    With namespace = false the rest is kept but unused, so `namespace` can be
    a factor (a local client against the same client across the link)."""

    # Drive from a network namespace of perflab's own across a shaped veth link (false: the driver on the
    # host, the rest kept unused).
    namespace: bool = False
    delay: Duration = Field(default=0.0, ge=0, le=10.0, description="one way, each direction")
    # Random variation of the delay, each direction (at most the delay).
    jitter: Duration = Field(default=0.0, ge=0, le=10.0)
    # The link's rate, each direction ("100mbit", "1gbit"; default: unlimited).
    rate: Rate | None = None
    # Packets dropped on the link, each direction ("0.5%").
    loss: Percent = 0.0
    # auto: netem where the kernel has it, else tbf for the rate and perflab's
    # delay relay for delay and jitter.
    mechanism: Literal["auto", "netem", "relay"] = "auto"

    @model_validator(mode="after")
    def _consistent(self) -> DriverNetwork:
        if self.jitter > self.delay:
            raise ValueError(f"jitter {self.jitter} s is larger than delay {self.delay} s; allowed: jitter <= delay")
        if self.mechanism == "relay" and self.loss:
            raise ValueError("loss needs netem (a TCP relay cannot drop packets); set mechanism = \"auto\" "
                             "or \"netem\", or loss = \"0%\"")
        return self

    def shape(self) -> Shape:
        return Shape(self.delay, self.jitter, self.loss, self.rate)


def network_problems(net: DriverNetwork) -> list[tuple[str, str]]:
    """`perflab check`'s part: what would stop a run with this network."""
    if not net.namespace:
        return []
    out = [("driver.network", p) for p in problems()]
    has = netem_status()
    needs_netem = net.mechanism == "netem" or net.loss > 0
    if needs_netem and has is False:
        what = "loss" if net.loss > 0 else "mechanism = \"netem\""
        out.append(("driver.network", f"{what} needs netem, and this kernel is built without it "
                    "(CONFIG_NET_SCH_NETEM is not set); use mechanism = \"auto\" (tbf and perflab's delay "
                    "relay) with loss = \"0%\""))
    return out
