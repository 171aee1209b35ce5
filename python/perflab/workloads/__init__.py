"""Workloads: what drives a target. One module per workload, which declares
itself: `@WORKLOADS.declare(name, description)` on its Workload class. The
first lookup imports this package's modules (perflab.registry), so a new
workload is its module and nothing else."""

from perflab.registry import Registry

WORKLOADS = Registry("workload", package=__name__)
