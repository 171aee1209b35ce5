"""The `stream` workload: TCP streams or UDP datagrams across a router.

    [workload]
    kind = "stream"
    protocol = "tcp"        # or "udp"
    family = "ipv4"         # or "ipv6"
    frame_size = 1518       # on-wire Ethernet frame, FCS included (RFC 2544's 64..1518)
    flows = 1
    receiver = "threads"    # one blocking thread per flow, or "epoll": one thread for all
    duration = "10s"
    rate = "500mbit"        # UDP only: frames' bits per second (open loop); default flat out

The senders (perflab's engine, one client per flow) run in the target's
client namespace, the receiver in its server namespace, both threads of
perflab's process. Goodput is what the receiver got, counted per second on
the run's clock: never the sender's count.

Frame size to payload: UDP payload = frame - 18 (Ethernet header and FCS)
- IP header (20, or 40 for IPv6) - 8; TCP's MSS = frame - 18 - IP header - 20,
set with TCP_MAXSEG on every sender socket. Both are stored. With the
target's offloads on, a veth carries GSO super-packets: the router forwards
fewer, larger "frames" than the wire would (the stored `router_pps` says how
many it really forwarded).

On one machine, sender, router and receiver share the CPUs: every run
stores where the CPU went over its window (/proc/stat: user, system,
softirq, idle; softirq is per CPU, not per namespace, so it is the whole
machine's), with the driver's own CPU and the client-bound flag.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from perflab import _engine
from perflab.analysis.linear import LINEAR_R2, LinearFit, linear_fit
from perflab.context import RunContext
from perflab.endpoints import Capability
from perflab.errors import UserError
from perflab.hostctl import netns
from perflab.hostctl.netns import Rate
from perflab.model import LoadResult, RunResult, without_label
from perflab.proc import CLOCK_TICKS_PER_S, parse_stat, read_text
from perflab.section import Section
from perflab.targets.router import NetworkEndpoint
from perflab.units import Duration
from perflab.workloads import WORKLOADS, harness
from perflab.workloads.base import Workload, WorkloadSettings

if TYPE_CHECKING:
    from perflab.store import Store

ETHERNET_OVERHEAD = 18  # header 14 + FCS 4
IP_HEADER = {"ipv4": 20, "ipv6": 40}
TRANSPORT_HEADER = {"udp": 8, "tcp": 20}
SERIES_SOURCE = "stream"


class StreamSettings(WorkloadSettings):
    kind: Literal["stream"]
    # TCP streams or UDP datagrams.
    protocol: Literal["tcp", "udp"] = "tcp"
    # IPv4 or IPv6 across the router.
    family: Literal["ipv4", "ipv6"] = "ipv4"
    # The on-wire Ethernet frame, FCS included (RFC 2544's 64..1518; jumbo frames up to 9018).
    frame_size: int = Field(default=1518, ge=64, le=9018)
    # Concurrent streams (or UDP senders).
    flows: int = Field(default=1, ge=1, le=256)
    # One blocking thread per flow, or "epoll": one thread for all.
    receiver: Literal["threads", "epoll"] = "threads"
    # Length of the measured window.
    duration: Duration = Field(default=10.0, gt=0, le=86400)
    # Time sent before the measured window.
    warmup: Duration = Field(default=1.0, ge=0, le=3600)
    # UDP only: the frames' bits per second, open loop (default: as fast as the sender goes).
    rate: Rate | None = None
    # TCP: bytes per write (the stream does not care where segments end).
    write_size: int = Field(default=131072, ge=1024, le=16 << 20)

    @model_validator(mode="after")
    def _fits(self) -> StreamSettings:
        if self.rate is not None and self.protocol != "udp":
            raise ValueError("rate paces UDP datagrams; TCP streams run as fast as the path allows")
        if self.payload < 1:
            least = ETHERNET_OVERHEAD + IP_HEADER[self.family] + TRANSPORT_HEADER[self.protocol] + 1
            raise ValueError(f"frame_size {self.frame_size} leaves no {self.protocol} payload over {self.family} "
                             f"(headers take {least - 1} bytes); allowed: at least {least}")
        return self

    @property
    def payload(self) -> int:
        """UDP payload, or TCP MSS, that makes frames of frame_size on the wire."""
        return self.frame_size - ETHERNET_OVERHEAD - IP_HEADER[self.family] - TRANSPORT_HEADER[self.protocol]


def _cpu_times() -> dict[str, float]:
    """Whole-machine CPU seconds by mode (/proc/stat's first line)."""
    stat = parse_stat(read_text("/proc/stat"))
    return {k.removeprefix("cpu."): v / CLOCK_TICKS_PER_S for k, v in stat.items() if k.startswith("cpu.")}


def _tx_packets(ns: str, dev: str) -> int:
    out = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["packets"])


@WORKLOADS.declare("stream", "TCP streams or UDP datagrams across a router, goodput counted by the receiver (Rust)")
class StreamWorkload(Workload[NetworkEndpoint]):
    metrics = ("rules.*", "goodput_mbps", "pps", "udp_sent", "udp_received", "udp_loss_pct", "tcp_retransmits",
               "router_pps", "frame_size", "payload_bytes", "mss_bytes", "flows", "receiver_cpu_s", "cpu.*", "sends",
               "errors.*", *harness.METRICS)
    Settings: ClassVar[type[WorkloadSettings]] = StreamSettings
    example: ClassVar[dict[str, Any]] = {"duration": "1s"}
    sample_factor: ClassVar[str] = "flows"
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.NETWORK})
    headline: ClassVar[tuple[str, ...]] = ("goodput_mbps", "pps")

    settings: StreamSettings

    def data_key(self) -> str:
        return ""  # nothing to load

    def writes(self) -> bool:
        return False

    def prepare(self, endpoint: NetworkEndpoint, ctx: RunContext) -> LoadResult:
        return LoadResult()

    def run(self, endpoint: NetworkEndpoint, ctx: RunContext) -> RunResult:
        s = self.settings
        if endpoint.mtu < s.frame_size - ETHERNET_OVERHEAD:
            raise UserError(f"workload stream: frame_size {s.frame_size} needs an MTU of at least "
                            f"{s.frame_size - ETHERNET_OVERHEAD}; the target's is {endpoint.mtu}",
                            "raise target.mtu, or lower workload.frame_size")
        result = RunResult(headline=list(self.headline))
        rate_pps = s.rate / (s.frame_size * 8) if s.rate else None
        size = s.payload if s.protocol == "udp" else s.write_size
        mss = s.payload if s.protocol == "tcp" else None
        family_passed_before = endpoint.rules_passed(s.family) if endpoint.rules_passed else None
        forwarded_before = _tx_packets(endpoint.router_ns, endpoint.router_out_dev)
        cpu_before = _cpu_times()
        started = time.monotonic()

        def progress(interval: _engine.Interval) -> None:
            if not interval.warmup:
                ctx.status(f"stream {s.protocol}/{s.family}: {interval.tps:,.0f} sends/s")

        ctx.status(f"stream {s.protocol}/{s.family}: {s.flows} flow(s), frame {s.frame_size} B")
        with harness.engine_errors("stream", hint="check the workload's settings"), netns.entered(endpoint.client_ns):
            out, received = _engine.stream_run(
                protocol=s.protocol, receiver=s.receiver, address=endpoint.server_address(s.family),
                flows=s.flows, size=size, t0_ns=ctx.t0_ns, duration=s.duration, warmup=s.warmup,
                rate_pps=rate_pps, server_netns=endpoint.server_ns, mss=mss, progress=progress,
                cancel=ctx.cancel)
        wall = time.monotonic() - started
        cpu = {k: v - cpu_before[k] for k, v in _cpu_times().items()}
        forwarded = _tx_packets(endpoint.router_ns, endpoint.router_out_dev) - forwarded_before
        harness.take_run(ctx, result, out, clients=s.flows, lost="stream: every flow failed")
        self._metrics(out, received, result, ctx, forwarded, wall, cpu)
        if endpoint.rules_now is not None:
            rules, install_s = endpoint.rules_now()
            result.add_metric("rules.count", rules.count, "rules",
                              f"{rules.type} rules ({rules.backend}) per family on the router's forward hook")
            if install_s is not None:
                result.add_metric("rules.install_s", install_s, "s",
                                  "time to install the rule set, both families, atomically (control plane)",
                                  higher_is_better=False)
        if family_passed_before is not None and endpoint.rules_passed is not None:
            crossed = endpoint.rules_passed(s.family) - family_passed_before
            result.add_metric("rules.passed_packets", crossed, "packets",
                              "packets the router's final counting rule accepted in this run: they crossed "
                              "every rule before it")
        return result

    def _metrics(self, out: _engine.DriverResult, rx: dict[str, Any], result: RunResult, ctx: RunContext,
                 forwarded: int, wall: float, cpu: dict[str, float]) -> None:
        s = self.settings
        add = result.add_metric
        start, end = out.measure_start_t_s, out.measure_start_t_s + out.measured_s
        # Whole seconds of the receiver's counts inside the measured window.
        first, last = int(start) + 1, int(end)
        seconds = list(range(first, last)) or [int(start)]
        bytes_s = [rx["bytes"][i] for i in seconds if i < len(rx["bytes"])]
        packets_s = [rx["packets"][i] for i in seconds if i < len(rx["packets"])]
        for i, (b, p) in enumerate(zip(rx["bytes"], rx["packets"], strict=False)):
            if b or p:
                ctx.series.add(SERIES_SOURCE, "goodput_mbps", i + 1.0, b * 8 / 1e6)
                if s.protocol == "udp":
                    ctx.series.add(SERIES_SOURCE, "pps", i + 1.0, float(p))
        span = max(len(bytes_s), 1)
        goodput = sum(bytes_s) * 8 / 1e6 / span
        add("goodput_mbps", goodput, "Mbit/s",
            f"payload bits per second received, over the {span} whole second(s) of the measured window "
            "(counted by the receiver)", higher_is_better=True)
        if s.protocol == "udp":
            add("pps", sum(packets_s) / span, "packets/s", "datagrams received per second (receiver)",
                higher_is_better=True)
            sent = int(rx["sent"])
            got = sum(rx["packets"])
            add("udp_sent", sent, "datagrams", "datagrams the senders sent (warm-up included)")
            add("udp_received", got, "datagrams", "datagrams the receiver got (warm-up included)")
            add("udp_loss_pct", 100.0 * (1 - got / sent) if sent else 0.0, "%",
                "datagrams sent and never received, over the whole run", higher_is_better=False)
        else:
            add("pps", forwarded / wall if wall > 0 else 0.0, "packets/s",
                "packets the router forwarded towards the receiver per second, over the whole run "
                "(with offloads, GSO super-packets)", higher_is_better=True)
            add("tcp_retransmits", rx["tcp_retransmits"], "segments",
                "TCP retransmissions over every sender socket (TCP_INFO tcpi_total_retrans)",
                higher_is_better=False)
        add("router_pps", forwarded / wall if wall > 0 else 0.0, "packets/s",
            "packets the router sent towards the server per second over the whole run (its device's counter)")
        add("frame_size", s.frame_size, "bytes", "on-wire frame size asked (Ethernet, FCS included)")
        add("payload_bytes" if s.protocol == "udp" else "mss_bytes", s.payload, "bytes",
            "UDP payload per datagram" if s.protocol == "udp" else "TCP maximum segment size set (TCP_MAXSEG)")
        add("flows", s.flows, "flows")
        # the driver is the senders: their CPU, its share, their connections
        harness.harness_metrics(result, out, per=("send", "send"), scheduled=s.rate is not None)
        add("receiver_cpu_s", rx["cpu_s"], "s", "CPU time of the receiver's threads over the whole run")
        for name in ("user", "system", "softirq", "idle"):
            if name in cpu:
                add(f"cpu.{name}_s", cpu[name], "s",
                    f"whole machine's {name} CPU time over the run ({wall:.1f} s wall; sender, router and "
                    "receiver share this machine; softirq is per CPU, not per namespace)")
        add("sends", out.transactions, "sends", "sends in the measured window (TCP writes or datagrams)")
        for kind, n in out.errors_by_kind.items():
            add(f"errors.{kind}", n, "sends", f"sends failed: {kind}", higher_is_better=False)

    # ------------------------------------------------------------ report

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Section]:
        """The study's analysis: throughput against the rule count, a line
        fitted per combination of the other factors (95% CI on the slope,
        R²), whether the loss is linear, and whether IPv4 and IPv6 differ."""
        from perflab.analysis import pivot
        from perflab.section import Section, Table, Text

        done = [r for r in runs if r["status"] == "done"]
        if not done:
            return []
        groups: dict[str, dict[str, Any]] = {}
        zero: dict[str, list[float]] = {}  # runs without rules, by their other factors
        zero_kinds: dict[str, set[str]] = {}  # the rule factors' levels those runs were planned under
        rule_factors = [f for f in pivot.varied(done) if f.startswith("target.rules")]
        for run in done:
            m = {x["name"]: x["value"] for x in store.metrics(run["id"])}
            if "goodput_mbps" not in m or "rules.count" not in m:
                continue
            base = {k: v for k, v in _flat_factors(run["factors"]).items() if not k.startswith("target.rules")}
            base_label = json.dumps(base, sort_keys=True, default=str)
            if m["rules.count"] == 0:
                # No rules is no rules, whatever the type or backend named: the
                # x = 0 point of every rule set's line with these other factors.
                zero.setdefault(base_label, []).append(m["goodput_mbps"])
                zero_kinds.setdefault(base_label, set()).add(
                    pivot.combo_label(rule_factors, [run["factors"].get(f) for f in rule_factors]))
                continue
            rules = (run.get("target") or {}).get("rules", {})
            key = {**base, "rules": f"{rules.get('type', '?')} ({rules.get('backend', '?')})"}
            label = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(key.items()))
            g = groups.setdefault(label, {"key": key, "base": base_label, "x": [], "y": []})
            g["x"].append(m["rules.count"])
            g["y"].append(m["goodput_mbps"])
        for g in groups.values():
            for y in zero.get(g["base"], []):
                g["x"].append(0.0)
                g["y"].append(y)
        rows, fits = [], {}
        for label, g in sorted(groups.items()):
            if len(set(g["x"])) < 2:
                continue
            fit = linear_fit(g["x"], g["y"])
            fits[label] = fit
            t = fit.trend
            lost_k = -t.slope * 1000  # positive: a loss
            loss = lost_k / fit.intercept * 100 if fit.intercept > 0 else float("nan")
            ci = (f"{-t.slope_high * 1000:.2f} to {-t.slope_low * 1000:.2f}" if np.isfinite(t.slope_low)
                  else "n/a")
            counts = sorted(set(g["x"]))
            reps = sorted({sum(1 for x in g["x"] if x == c) for c in counts})
            shared = len(zero.get(g["base"], []))
            each = str(reps[0]) if len(reps) == 1 else f"{reps[0]}-{reps[-1]}"
            used = f"{fit.n} runs at {len(counts)} rule counts, {each} repetition(s) each"
            if shared and len(zero_kinds.get(g["base"], ())) > 1:
                used += f" ({shared} 0-rule runs pooled)"
            rows.append([label, f"{min(g['x']):g}-{max(g['x']):g}", used, round(fit.intercept, 1),
                         round(lost_k, 3), ci, round(loss, 2), round(fit.r2, 3), _verdict(fit)])
        if not rows:
            return [Section("Stream", [Text("No factor varies the rule count with two or more levels: "
                                            "no loss per rule to fit.")])]
        pooled = [f"{len(zero[b])} 0-rule runs planned under {' and '.join(sorted(k))}"
                  for b, k in sorted(zero_kinds.items()) if len(k) > 1]
        blocks: list[Any] = [
            Text("Goodput (Mbit/s, counted by the receiver) against the number of rules on the router's forward "
                 "hook, a least-squares line per combination of the other factors, every repetition a point. "
                 "Losses are positive throughout: \"Mbit/s lost per 1000 rules\" and \"loss % per 1000 rules\" "
                 "are above zero when rules cost throughput, below zero when throughput rose. "
                 f"The slope's interval is 95% (Student t, n-2 df); a loss is called linear when the line explains "
                 f"at least {LINEAR_R2:.0%} of the variance (R²) and its slope is below zero with the interval "
                 "excluding zero. Sender, router and receiver share this machine's CPUs: read each run's cpu.* "
                 "metrics with its throughput."),
        ]
        if pooled:
            blocks.append(Text("Identical set-ups pooled: with no rules the rule type and backend change nothing, so "
                               "the 0-rule runs of every rule type with the same other factors are one set-up, "
                               "pooled as the x = 0 point of each of their lines (" + "; ".join(pooled) + ")."))
        blocks.append(Table(["combination", "rules", "runs used", "Mbit/s at 0 rules", "Mbit/s lost per 1000 rules",
                             "95% CI (lost per 1000)", "loss % per 1000 rules", "R²", "verdict"], rows,
                            "Throughput lost per 1000 rules (linear fit; positive = a loss)"))
        blocks += _family_comparison(groups, fits)
        blocks += _rule_figures(groups)
        return [Section("Stream: throughput lost per rule", blocks, headline=True)]


def _flat_factors(factors: dict[str, Any]) -> dict[str, Any]:
    """Factors with table levels spread to dotted keys ("workload" = {protocol
    = "udp"} -> workload.protocol = "udp")."""
    out: dict[str, Any] = {}
    for path, value in factors.items():
        if isinstance(value, dict):
            for k, v in without_label(value).items():  # a level's label names it, it sets nothing
                out[f"{path}.{k}"] = v
        else:
            out[path] = value
    return out


def _verdict(fit: LinearFit) -> str:
    t = fit.trend
    if not np.isfinite(t.slope_low):
        return "too few points for an interval"
    if not t.significant:
        return "no loss shown (interval includes 0)"
    if t.slope > 0:
        return "throughput rises with rules (noise?)"
    return "linear loss" if fit.r2 >= LINEAR_R2 else f"loss, not linear (R² {fit.r2:.2f})"


def _family_comparison(groups: dict[str, dict[str, Any]], fits: dict[str, LinearFit]) -> list[Any]:
    from perflab.section import Table

    by_rest: dict[str, dict[str, str]] = {}
    for label, g in groups.items():
        family = g["key"].get("workload.family")
        if family is None or label not in fits:
            continue
        rest = json.dumps({k: v for k, v in g["key"].items() if k != "workload.family"}, sort_keys=True, default=str)
        by_rest.setdefault(rest, {})[family] = label
    rows = []
    for rest, fam in sorted(by_rest.items()):
        if {"ipv4", "ipv6"} - fam.keys():
            continue
        a, b = fits[fam["ipv4"]], fits[fam["ipv6"]]
        at0 = b.intercept / a.intercept if a.intercept > 0 else float("nan")
        others = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(json.loads(rest).items()))
        if not all(np.isfinite(f.trend.slope_low) for f in (a, b)):
            # no interval on a side (two rule counts, one run each): nothing to compare, so no "same"
            verdict = "not tested (too few points for an interval)"
        else:
            verdict = "same (intervals overlap)" if a.overlaps(b) else "different (intervals apart)"
        rows.append([others, round(-a.slope * 1000, 3), round(-b.slope * 1000, 3), verdict, round(at0, 3)])
    if not rows:
        return []
    return [Table(["other factors", "IPv4 Mbit/s lost per 1000 rules", "IPv6 Mbit/s lost per 1000 rules", "loss per rule",
                   "IPv6 / IPv4 at 0 rules"], rows,
                  "IPv4 against IPv6: the loss per rule, and the offset between the families (the study found a "
                  "separate IPv4/IPv6 difference)")]


def _rule_figures(groups: dict[str, dict[str, Any]]) -> list[Any]:
    """Goodput against rules, one line per protocol x family x rule type (x
    receiver), one figure per frame size, as the paper's figures."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    from perflab.section import Figure

    by_frame: dict[Any, list[tuple[str, dict[str, Any]]]] = {}
    for label, g in groups.items():
        if len(set(g["x"])) >= 2:
            by_frame.setdefault(g["key"].get("workload.frame_size"), []).append((label, g))
    out = []
    for frame, lines in sorted(by_frame.items(), key=lambda kv: str(kv[0])):
        fig = MplFigure(figsize=(9.5, 4.2), layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        ax.grid(True, color="#e3e6ec", linewidth=0.8)
        for label, g in lines[:24]:
            xs = sorted(set(g["x"]))
            means = [float(np.mean([y for x, y in zip(g["x"], g["y"], strict=True) if x == v])) for v in xs]
            lows = [m - min(y for x, y in zip(g["x"], g["y"], strict=True) if x == v) for v, m in zip(xs, means, strict=True)]
            highs = [max(y for x, y in zip(g["x"], g["y"], strict=True) if x == v) - m for v, m in zip(xs, means, strict=True)]
            short = ", ".join(p for p in label.split(", ") if not p.startswith("frame_size="))
            ax.errorbar(xs, means, yerr=[lows, highs], marker="o", markersize=3, linewidth=1.4, capsize=2,
                        label=short)
        ax.set_xlabel("rules on the forward hook")
        ax.set_ylabel("goodput (Mbit/s)")
        # beside the axes, never over the lines
        fig.legend(loc="outside right upper", fontsize=6, frameon=False)
        name = f"stream-rules-frame-{frame}" if frame is not None else "stream-rules"
        out.append(Figure(name, fig, f"Goodput against the rule count{f', {frame}-byte frames' if frame else ''}: "
                                     "mean and range over repetitions"))
    return out
