"""Workloads: what drives a target. One module per workload, one registry line each."""

from perflab.registry import Registry

WORKLOADS = Registry("workload")
WORKLOADS.register(
    "sql",
    "perflab.workloads.sql:SqlWorkload",
    "given SQL statements or files: setup once, then a timed body; per-statement times",
)
WORKLOADS.register(
    "tpch",
    "perflab.workloads.tpch:TpchWorkload",
    "TPC-H-derived decision support (DBT-3): load, power and throughput tests with refresh functions",
)
