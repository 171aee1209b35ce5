"""Workloads: what drives a target. One module per workload, one registry line each."""

from perflab.registry import Registry

WORKLOADS = Registry("workload")
WORKLOADS.register(
    "sql",
    "perflab.workloads.sql:SqlWorkload",
    "given SQL statements or files: setup once, then a timed body; per-statement times",
)
WORKLOADS.register(
    "tpcb",
    "perflab.workloads.tpcb:TpcbWorkload",
    "pgbench's TPC-B-like transactions (tpcb-like, simple-update, select-only) from a Rust driver",
)
WORKLOADS.register(
    "tpch",
    "perflab.workloads.tpch:TpchWorkload",
    "TPC-H-derived decision support (DBT-3): load, power and throughput tests with refresh functions",
)
WORKLOADS.register(
    "tpcc",
    "perflab.workloads.tpcc:TpccWorkload",
    "TPC-C: the five order-entry transactions from a Rust driver, tpmC and NOPM, the 12 consistency checks",
)
