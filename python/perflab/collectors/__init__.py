"""Collectors: telemetry samplers on the run's monotonic clock. One module each."""

from perflab.registry import Registry

COLLECTORS = Registry("collector")
