"""Where the engine's load harness runs: here (`kind = "local"`, the
default) or as Ray actors over a Ray cluster (`kind = "ray"`,
perflab.drivers.ray), each driving its share of the clients and of the rate.

A workload calls its harness binding through `engine_run(ctx, _engine.tpcb_run,
conninfo, **kwargs)` rather than `_engine.tpcb_run(...)`, its arguments checked
against the binding's own signature (the stub): the local driver makes exactly
that call; a distributed one splits the harness settings' (`harness`)
`clients`, `threads` and `rate` over its workers, gives each its own `seed`, starts them on one
barrier and returns the merged result (perflab.drivers.merge), which has the
fields of `_engine.DriverResult` (so both are typed as one). The runner holds one driver per experiment
(`Drivers`), so a Ray cluster is started once, and adds each run's driver
figures (clock offsets, per-worker CPU) to the run's result. Which driver
a run gets (`Drivers`) is chosen in choose.py, above the drivers it names.
"""

from __future__ import annotations

import abc
import importlib.util
from collections.abc import Callable
from typing import Any, ParamSpec, cast

from perflab import _engine
from perflab.context import RunContext
from perflab.model import RunResult

# The harness settings (`harness=`) a distributed driver splits over its workers.
SPLIT_ARGS = ("clients", "threads", "rate", "seed")
RAY_EXTRA_HINT = 'install the extra: pip install "perflab[ray]" (./dev setup installs it)'


class EngineDriver(abc.ABC):
    """Runs one harness binding of `_engine` for one run."""

    @abc.abstractmethod
    def run(self, function: str, conninfo: str, ctx: RunContext, progress: Callable[[Any], object] | None,
            kwargs: dict[str, Any]) -> object:
        """`_engine.<function>(conninfo, **kwargs, progress=..., cancel=ctx.cancel)`
        or its equivalent; returns a `_engine.DriverResult` or a result with its fields."""

    def figures(self) -> RunResult:
        """What the driver itself measured in the last run (stored with the run),
        handed over once."""
        return RunResult()

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release what the driver started (a Ray cluster, its actors)."""


class LocalDriver(EngineDriver):
    """The engine in this process: the call as it always was."""

    def run(self, function: str, conninfo: str, ctx: RunContext, progress: Callable[[Any], object] | None,
            kwargs: dict[str, Any]) -> object:
        return getattr(_engine, function)(conninfo, **kwargs, progress=progress, cancel=ctx.cancel)


LOCAL = LocalDriver()


P = ParamSpec("P")


def engine_run(ctx: RunContext, function: Callable[P, _engine.DriverResult], *args: P.args,
               **kwargs: P.kwargs) -> _engine.DriverResult:
    """Run a harness binding (`_engine.tpcb_run`, ...; its first argument the
    address, the rest by keyword, `cancel` left to the driver) on the run's
    driver (`ctx.driver`, else here). A distributed driver's merged result has
    every field of the engine's record (perflab.drivers.merge), so it is typed
    as the binding's."""
    driver = ctx.driver if isinstance(ctx.driver, EngineDriver) else LOCAL
    (conninfo,) = args
    progress = kwargs.pop("progress", None)
    return cast(_engine.DriverResult, driver.run(function.__name__, str(conninfo), ctx,
                                                 cast("Callable[[Any], object] | None", progress), dict(kwargs)))


def ray_installed() -> bool:
    return importlib.util.find_spec("ray") is not None


def split_evenly(total: int, parts: int) -> list[int]:
    """`total` as `parts` integers that differ by at most one, largest first."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]
