"""The syscalls collector's parts that need no tracer: the calls it traces,
the log-linear histogram of their durations (`bucket_of`, computed the same
way in the BPF program and here, and the percentiles read from it within
BUCKET_RELATIVE_ERROR), and the bpftrace program (`bpftrace_script`) that
counts them per call and file class."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CALLS = ("openat", "read", "pread64", "preadv", "write", "pwrite64", "pwritev", "lseek", "close", "fsync",
         "fdatasync", "sync_file_range")
SYNC_CALLS = ("fsync", "fdatasync")

# The histogram's resolution: 2^SUB_BITS buckets per power of two, so a
# bucket is at most 2^-SUB_BITS of its lower bound wide (3.125%): the
# relative error bound of a percentile read from it.
SUB_BITS = 5
BUCKET_RELATIVE_ERROR = 2.0 ** -SUB_BITS


def bucket_of(ns: int) -> int:
    """The histogram key of a duration in ns, as the BPF program computes it
    (`_bucket_bpf`): the value itself below 2^(SUB_BITS+1), else
    (e - SUB_BITS) * 2^SUB_BITS + (ns >> (e - SUB_BITS)), e = floor(log2 ns)."""
    ns = max(0, int(ns))
    e = ns.bit_length() - 1
    if e < SUB_BITS:
        return ns
    return ((e - SUB_BITS) << SUB_BITS) + (ns >> (e - SUB_BITS))


def bucket_bounds(key: int) -> tuple[int, int]:
    """[low, high) in ns of a histogram key: every duration with that key
    is an integer in low .. high - 1."""
    if key < 1 << (SUB_BITS + 1):
        return key, key + 1
    shift = (key >> SUB_BITS) - 1
    mantissa = (1 << SUB_BITS) + (key & ((1 << SUB_BITS) - 1))
    return mantissa << shift, (mantissa + 1) << shift


@dataclass
class Agg:
    """One call type and class: count, total, min, max (ns), log-linear histogram (ns)."""

    count: int = 0
    total_ns: int = 0
    min_ns: int | None = None
    max_ns: int = 0
    # bucket_of(ns) -> calls
    buckets: dict[int, int] = field(default_factory=dict)

    def add(self, dur_ns: int) -> None:
        self.count += 1
        self.total_ns += dur_ns
        self.min_ns = dur_ns if self.min_ns is None else min(self.min_ns, dur_ns)
        self.max_ns = max(self.max_ns, dur_ns)
        key = bucket_of(dur_ns)
        self.buckets[key] = self.buckets.get(key, 0) + 1


def percentile_from_buckets(buckets: dict[int, int], q: float, low: float | None = None,
                            high: float | None = None) -> float:
    """The q-quantile (0..1), in ns, of the durations a histogram counts, as
    numpy.percentile's default (linear between the order statistics at
    q x (n - 1)) would give it from the durations themselves.

    Each order statistic is placed inside its bucket (the k-th of c calls in
    [lo, hi) at lo + (hi - 1 - lo) (k + 0.5) / c), then kept inside [low,
    high] (the min and max, exact). Why the error is at most
    BUCKET_RELATIVE_ERROR of the exact value: an order statistic s and its
    estimate lie in the same bucket, so they differ by less than its width,
    which is at most 2^-SUB_BITS of its lower bound <= s; the linear mix of two
    order statistics with weights (1 - f, f) then errs by at most 2^-SUB_BITS x
    ((1 - f) s_i + f s_i+1), the exact value. Clamping to [min, max], which
    hold every duration, only brings an estimate nearer."""
    total = sum(buckets.values())
    if total == 0:
        return math.nan
    pos = min(max(q, 0.0), 1.0) * (total - 1)
    i = int(pos)
    frac = pos - i
    wanted = [i] if frac == 0 or i + 1 >= total else [i, i + 1]
    found: list[float] = []
    seen = 0
    for key in sorted(buckets):
        c = buckets[key]
        if not c:
            continue
        lo, hi = bucket_bounds(key)
        while wanted and wanted[0] < seen + c:
            k = wanted.pop(0) - seen
            found.append(lo + (hi - 1 - lo) * (k + 0.5) / c)
        if not wanted:
            break
        seen += c
    value = found[0] if len(found) == 1 else found[0] + (found[1] - found[0]) * frac
    if low is not None:
        value = max(value, low)
    if high is not None:
        value = min(value, high)
    return value


def exact_percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    pos = q * (len(s) - 1)
    i = int(pos)
    return s[i] if i + 1 >= len(s) else s[i] + (s[i + 1] - s[i]) * (pos - i)


# --------------------------------------------------------------------- bpftrace

# A file class as the probes test it: (class number, device, directory inode, depth, name prefix)
Rule = tuple[int, int, int, int, "str | None"]


def _classify(fd_expr: str, rules: list[Rule]) -> str:
    """bpftrace statements that set $c to the class number of fd `fd_expr`:
    the first rule whose directory is the file's parent (depth 1) or
    grandparent (depth 2) and whose prefix, if any, starts the file's name."""
    tests = []
    for number, dev, ino, depth, prefix in rules:
        cond = f"$v == {dev} && {'$i' if depth == 1 else '$g'} == {ino}"
        if prefix:
            cond += f' && strncmp(str($fp->f_path.dentry->d_name.name), "{prefix}", {len(prefix.encode())}) == 0'
        tests.append((cond, number))
    chain = ""
    for cond, number in reversed(tests):
        chain = f"if ({cond}) {{ $c = {number}; }}" + (f" else {{ {chain} }}" if chain else "")
    grand = "\n    $g = $p->d_parent->d_inode->i_ino;" if any(r[3] == 2 for r in rules) else ""
    return f"""
  $fdt = ((struct task_struct *)curtask)->files->fdt;
  $c = 0;
  if ((uint64){fd_expr} < (uint64)$fdt->max_fds) {{
    $fp = (struct file *)*(uint64 *)((uint64)$fdt->fd + (uint64){fd_expr} * 8);
    $p = $fp->f_path.dentry->d_parent;
    $i = $p->d_inode->i_ino;
    $v = $p->d_inode->i_sb->s_dev;{grand}
    {chain}
  }}"""


def _bucket_bpf() -> str:
    """bpftrace statements that set $hb to bucket_of($d): $he = floor(log2 $d)
    by halving the search (6 comparisons), then the top SUB_BITS + 1 bits.
    (Names of their own: a probe's variable keeps its first type, and $v is
    a dev_t in the classifier.)"""
    k = SUB_BITS
    steps = "".join(f"\n  if ($hx >= {1 << n}) {{ $he = $he + {n}; $hx = $hx >> {n}; }}" for n in (32, 16, 8, 4, 2))
    return (f"\n  $hx = (uint64)$d; $he = (uint64)0;{steps}\n  if ($hx >= 2) {{ $he = $he + 1; }}"
            f"\n  if ($he < {k}) {{ $hb = (uint64)$d; }}"
            f" else {{ $hb = (($he - {k}) << {k}) + ((uint64)$d >> ($he - {k})); }}")


def bpftrace_script(postmaster: int, pids: list[int], dirs: list[Rule], interval_ms: int) -> str:
    pred = f"(pid == {postmaster} || ((struct task_struct *)curtask)->real_parent->tgid == {postmaster} || @tr[pid])"
    seed = "".join(f" @tr[{p}] = 1;" for p in pids)
    out = [
        f'BEGIN {{{seed} printf("B %llu\\n", nsecs); }}',
        f"tracepoint:sched:sched_process_fork /args->parent_pid == {postmaster} || @tr[args->parent_pid]/ "
        "{ @tr[args->child_pid] = 1; }",
        "tracepoint:sched:sched_process_exit /@tr[pid]/ { delete(@tr[pid]); }",
    ]
    for n, call in enumerate(CALLS):
        sync = call in SYNC_CALLS
        if call == "openat":
            out.append(f"tracepoint:syscalls:sys_enter_openat /{pred}/ {{ @t[tid] = nsecs; }}")
            out.append(
                "tracepoint:syscalls:sys_exit_openat /@t[tid]/ {\n  $d = nsecs - @t[tid];"
                + "\n  $c = 0;\n  if (args->ret >= 0) {" + _classify("args->ret", dirs) + "\n  }"
                + _bucket_bpf()
                + f"\n  @st[{n}, $c] = stats($d); @h[{n}, $c, $hb] = count(); @mn[{n}, $c] = min($d);"
                f" @mx[{n}, $c] = max($d);\n  delete(@t[tid]);\n}}")
            continue
        out.append(f"tracepoint:syscalls:sys_enter_{call} /{pred}/ {{" + _classify("args->fd", dirs)
                   + "\n  @c[tid] = $c; @t[tid] = nsecs;\n}")
        # every sync is kept in a map, keyed by its start and thread, printed
        # and cleared each interval: no event per call (a wake-up of bpftrace
        # per fdatasync cost more than the probes). Two maps alternate, so the
        # one printed and cleared is not being written.
        rec = (f"\n  if (@ep) {{ @rb[@t[tid], tid] = ({n}, $c, pid, $d); }}"
               f" else {{ @ra[@t[tid], tid] = ({n}, $c, pid, $d); }}") if sync else ""
        out.append(
            f"tracepoint:syscalls:sys_exit_{call} /@t[tid]/ {{\n  $d = nsecs - @t[tid]; $c = @c[tid];"
            + _bucket_bpf()
            + f"\n  @st[{n}, $c] = stats($d); @h[{n}, $c, $hb] = count(); @mn[{n}, $c] = min($d);"
            f" @mx[{n}, $c] = max($d);{rec}\n  delete(@t[tid]); delete(@c[tid]);\n}}")
    out.append(f"interval:ms:{interval_ms} {{ @ep = 1 - @ep;"
               " if (@ep) { print(@ra); clear(@ra); } else { print(@rb); clear(@rb); }"
               ' print(@st); printf("T %llu\\n", nsecs); }')
    out.append('END { print(@ra); print(@rb); print(@st); print(@h); print(@mn); print(@mx); printf("E %llu\\n", nsecs);'
               " clear(@ra); clear(@rb); clear(@ep); clear(@st); clear(@h); clear(@mn); clear(@mx); clear(@t);"
               " clear(@c); clear(@tr); }")
    return "\n".join(out) + "\n"
