"""The Workload interface: data set, load phase, run phase, checks, metrics."""

from __future__ import annotations

import abc
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from perflab.context import RunContext
from perflab.endpoints import Capability, Endpoint
from perflab.model import CheckResult, LoadResult, RunResult
from perflab.section import Section
from perflab.settings_model import StrictModel

if TYPE_CHECKING:
    from perflab.store import Store
    from perflab.targets.base import TargetSettings


class WorkloadSettings(StrictModel):
    kind: str


# The endpoint a workload drives: its `needs` guarantee the type, because
# `perflab check` refuses a target whose endpoint lacks them.
EndpointT = TypeVar("EndpointT", bound=Endpoint)


class Workload(abc.ABC, Generic[EndpointT]):
    Settings: ClassVar[type[WorkloadSettings]]
    # Settings fields that define the data set: prepared data is reused across
    # runs while these (and the target) are unchanged.
    data_fields: ClassVar[tuple[str, ...]] = ()
    # What this workload needs of the target's endpoint (`perflab check`
    # refuses a target that lacks any of it), and, when not empty, the
    # capabilities of which it needs at least one (PostgreSQL's wire or MySQL's).
    needs: ClassVar[frozenset[Capability]] = frozenset({Capability.SQL})
    needs_any: ClassVar[frozenset[Capability]] = frozenset()
    # Headline metric names, in the order `show` and the progress line print them.
    headline: ClassVar[tuple[str, ...]] = ()
    # The metrics its runs store (fnmatch patterns where the data names them:
    # "errors.*"), so that `check` refuses a search goal on one that never
    # comes; empty: not declared, and goals are not checked.
    metrics: ClassVar[tuple[str, ...]] = ()
    # Its run phase is the engine's load harness, called through
    # perflab.drivers.engine_run: it can run on a distributed driver ([driver] kind = "ray").
    distributable: ClassVar[bool] = False
    # The settings of the smallest valid [workload] table besides its kind (a
    # short run), and an integer setting with a range that it takes as a
    # factor: what tests/test_spec_fuzz.py starts each kind's documents from.
    example: ClassVar[dict[str, Any]] = {}
    sample_factor: ClassVar[str] = ""
    # How figures name its per-second series where the stored name is the
    # engine's ("tps" of an HTTP run is requests per second: {"tps": "req/s"}).
    series_labels: ClassVar[dict[str, str]] = {}

    def __init__(self, settings: WorkloadSettings) -> None:
        self.settings = settings

    def data_key(self) -> str:
        return json.dumps(
            {"kind": self.settings.kind} | {f: getattr(self.settings, f) for f in self.data_fields},
            sort_keys=True,
            default=str,
        )

    @classmethod
    def preflight(cls, settings: Any, base_dir: Path) -> list[tuple[str, str]]:
        """Problems (dotted path, text) the workload would meet, found without
        starting anything (files it names that cannot be read, relative to
        `base_dir`, the experiment file's directory). Default: none."""
        return []

    @classmethod
    def cache_additions(cls, settings: Any, target: TargetSettings, base_dir: Path) -> dict[Path, int]:
        """What a run with these settings against `target` (its settings) would
        add to a cache (perflab/cache.py): entry directory -> estimated bytes,
        from the parameters alone; `check` warns when a disk lacks the room.
        Default: nothing."""
        return {}

    def writes(self) -> bool:
        """Whether this workload writes to the target (then an external target
        needs allow_destructive = true)."""
        return True

    def reload_for_rerun(self, earlier_effects: list[dict[str, Any]]) -> str | None:
        """Why a run run again (resumed after a kill, or retried) needs its
        data set loaded first: an earlier attempt changed the data in a way
        nothing can undo (`earlier_effects`: what its attempts recorded with
        ctx.record_effect). The runner then loads it again before the run and
        the report marks the run "fresh load". None (the default): the run
        undoes or records what an earlier attempt did itself, or changed nothing."""
        return None

    @abc.abstractmethod
    def prepare(self, endpoint: EndpointT, ctx: RunContext) -> LoadResult:
        """Create and load the data set (the timed load test)."""

    @abc.abstractmethod
    def run(self, endpoint: EndpointT, ctx: RunContext) -> RunResult:
        """Drive the target for one run."""

    def check(self, endpoint: EndpointT, ctx: RunContext) -> CheckResult:
        """Consistency checks after a run. Default: none."""
        return CheckResult()

    @classmethod
    def report_sections(cls, store: Store, runs: list[dict[str, Any]]) -> list[Section]:
        """Sections this workload adds to the report (TPC-H: per-query bars per
        stream; TPC-B: TPS and latency), built from the store only. `runs` are
        the run rows (Store.runs()) of this workload, every status. Default: none."""
        return []
