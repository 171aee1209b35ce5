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
    "oltp",
    "perflab.workloads.oltp:OltpWorkload",
    "sysbench's OLTP scripts (point_select, read_only, read_write, ...) on its sbtest tables from a Rust driver",
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
WORKLOADS.register(
    "http",
    "perflab.workloads.http:HttpWorkload",
    "HTTP/1.1 GETs of a SPECweb99-like file set from a Rust driver: req/s, Mb/s, latency per class",
)
WORKLOADS.register(
    "ssb",
    "perflab.workloads.ssb:SsbWorkload",
    "the Star Schema Benchmark: generated star schema, the 13 queries in power-style rounds",
)
WORKLOADS.register(
    "queries",
    "perflab.workloads.queries:QueriesWorkload",
    "a user's own query set (a directory of .sql files or inline), seeded parameters, streams, per-query times",
)
WORKLOADS.register(
    "stream",
    "perflab.workloads.stream:StreamWorkload",
    "TCP streams or UDP datagrams across a router, goodput counted by the receiver (Rust)",
)
