"""The TPC-C workload's report section, built from the store only: the
metrics per run, the mix achieved against clause 5.2.3, each type's 90th
percentile against clause 5.2.5.4, and the rules the runs followed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perflab.model import fmt_factors
from perflab.workloads.tpcc import constants, mix

if TYPE_CHECKING:
    from perflab.store import Store

METRICS = (("tpmC", "tpmC"), ("nopm", "NOPM (database)"), ("new_orders_per_min", "New-Orders/min (driver)"),
           ("tpm_server", "TPM (server)"), ("efficiency", "efficiency"), ("rollback_pct", "rollbacks %"),
           ("failed", "failed"), ("driver_cpu_per_new_order_us", "driver CPU us/New-Order"))
# Transactions later than latency_limit, and (under a rate) not sent for it: columns only where runs count them.
LIMIT_METRICS = ("late", "skipped")


def headline(store: Store, runs: list[dict[str, Any]]) -> list[Any]:
    """tpmC and NOPM per factor level over the repetitions, and the change
    each kernel or server feature makes (each factor's levels against its
    first), in the lkml list form: "huge pages: on vs off: tpmC +8.0% [..]"."""
    from perflab.analysis import pivot
    from perflab.section import Section, Table, Text

    done = pivot.done(runs)
    if not done:
        return []
    values = {r["id"]: {m["name"]: m["value"] for m in store.metrics(r["id"])} for r in done}

    def metric(name: str) -> Any:
        return lambda run: values.get(run["id"], {}).get(name)

    headers, rows = pivot.per_level(done, [("tpmC", metric("tpmC")), ("NOPM", metric("nopm"))])
    blocks: list[Any] = [Table(headers, rows, "TPC-C: tpmC and NOPM per factor level (mean over repetitions)"),
                         Text(pivot.INTERVAL_NOTE.format(center="mean"))]
    changes = [*pivot.change_list(done, metric("tpmC"), True, "tpmC"),
               *pivot.change_list(done, metric("nopm"), True, "NOPM")]
    if changes:
        blocks += [Text("The change each feature makes, against the factor's first level (the other factors at "
                        "their first level where those runs exist): the ratio of the geometric means as a "
                        "percentage, its Welch 95% interval on the logarithms, the runs on each side and the "
                        "verdict (Benjamini-Hochberg over this list; none below 3 runs a side)."),
                   Table(["change"], [[c] for c in changes], "TPC-C: change per feature")]
    return [Section("TPC-C: tpmC and NOPM per feature", blocks, headline=True)]


def sections(store: Store, runs: list[dict[str, Any]]) -> list[Any]:
    from perflab.section import Section, Table, Text
    from perflab.store import RUN_MARKS

    if not runs:
        return []
    metric_rows, mix_rows, latency_rows, rule_rows = [], [], [], []
    values = {run["id"]: {r["name"]: r["value"] for r in store.metrics(run["id"])} for run in runs}
    # late and skipped (latency_limit; skipped under a rate) get a column where any run counted them
    shown = [*METRICS, *((k, k) for k in LIMIT_METRICS if any(k in values[r["id"]] for r in runs))]
    for run in runs:
        m = values[run["id"]]
        factors = fmt_factors(run["factors"], ", ")
        metric_rows.append([run["id"], factors, run["status"], *[m.get(k) for k, _ in shown],
                            ", ".join(run["flags"])])
        # the tables without a flags column carry the run's marks (resumed, retried, fresh load) in its status
        marked = [f for f in run["flags"] if f in RUN_MARKS]
        head = [run["id"], factors, run["status"] + (f" ({', '.join(marked)})" if marked else "")]
        shares = {t: m.get(f"mix.{t}_pct") for t in mix.TYPES}
        below = [] if None in shares.values() else mix.below_spec({t: v or 0.0 for t, v in shares.items()})
        mix_rows.append([*head, *[shares[t] for t in mix.TYPES], "; ".join(below) or ("ok" if shares["payment"]
                                                                                    is not None else "-")])
        cells = []
        for t, limit in mix.P90_LIMIT_S.items():
            p90 = m.get(f"{t}.latency_p90_ms")
            ok = m.get(f"limit.{t}_p90_ok")
            cells.append("-" if p90 is None else f"{p90:.1f} ms / {limit:g} s" + ("" if ok != 0.0 else " OVER"))
        latency_rows.append([*head, *cells])
        ran = sorted(r["name"].removeprefix("check.consistency_") for r in store.metrics(run["id"])
                     if r["name"].startswith("check.consistency_"))
        failed = sorted(r["name"].removeprefix("check.consistency_") for r in store.metrics(run["id"])
                        if r["name"].startswith("check.consistency_") and r["value"] == 0.0)
        c_run, c_load = m.get("constants.c_last_run"), m.get("constants.c_last_load")
        delta = None if c_run is None or c_load is None else abs(int(c_run) - int(c_load))
        rule_rows.append([
            *head,
            "-" if "keying" not in m else ("on" if m["keying"] else "off"),
            "-" if "procedures" not in m else ("procedures" if m["procedures"] else "statements"),
            ", ".join(str(int(c)) for c in ran) or "none stored",
            ", ".join(str(int(c)) for c in failed) or ("-" if not ran else "none"),
            "-" if delta is None else (f"{int(c_run or 0)} / {int(c_load or 0)} / {delta}"
                                       + ("" if constants.delta_ok(int(c_run or 0), int(c_load or 0)) else " BAD")),
            "-" if "constants.c_id" not in m else f"{int(m['constants.c_id'])} / {int(m['constants.ol_i_id'])}",
        ])
    blocks: list[Any] = [
        Text("tpmC counts the New-Order transactions completed per minute of the measured window (the warm-up "
             "excluded), the intended 1% rollbacks included (clause 5.4.1). NOPM counts the orders the database "
             "took over the same window, from sum(d_next_o_id) read every 20 ms and interpolated at the window's "
             "edges, so it trusts nothing the driver says; it leaves out the rollbacks, so it sits about 1% "
             "below tpmC. TPM is the server's own count of transactions (pg_stat_database) over the whole run. "
             "Efficiency, with keying on only, is tpmC over the 12.86 per warehouse that keying and think "
             "times allow. Without keying the clients run back to back, as sysbench's and HammerDB's TPC-C do: "
             "the figures are then not comparable with published TPC-C results."),
        Table(["run", "factors", "status", *[label for _, label in shown], "flags"], metric_rows,
              "TPC-C metrics per run"),
        Table(["run", "factors", "status", *[f"{mix.LABELS[t]} %" for t in mix.TYPES], "below clause 5.2.3"],
              mix_rows, "the mix achieved; minimums: Payment 43%, Order-Status, Delivery and Stock-Level 4% each "
              "(a run below any is flagged mix-below-spec); the default deck of 23 gives 43.5/43.5/4.3/4.3/4.3"),
        Table(["run", "factors", "status", *[f"{mix.LABELS[t]} p90" for t in mix.P90_LIMIT_S]], latency_rows,
              "each type's 90th percentile response time against clause 5.2.5.4's limit (OVER: flagged "
              "invalid-metrics); New-Order with its rollbacks; Delivery runs inline, so its limit is the 80 s its "
              "deferred execution may take, not the 5 s of queuing it"),
        Table(["run", "factors", "status", "keying", "mode", "conditions checked", "conditions failed",
               "C_LAST run / load / delta", "C_ID / OL_I_ID"], rule_rows,
              "the rules followed: keying and think times; transactions as statements or PL/pgSQL functions; "
              "Delivery inline (the spec allows it deferred); clause 3.3.2's consistency conditions checked after "
              "the run (11 only until the first Delivery after a load); the NURand constants, the run's C_LAST "
              "by clause 2.1.6.1's rule: delta in 65..119, neither 96 nor 112"),
    ]
    return [*headline(store, runs), Section("TPC-C runs", blocks)]
