"""The Target interface: how a system under test is provisioned, configured,
reached and torn down."""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from perflab.settings_model import StrictModel


def creatable_problems(key: str, path: Path) -> list[tuple[str, str]]:
    """Whether `path` exists or can be made (its nearest existing ancestor is a
    directory this user may write), as a problem at the dotted `key`."""
    base = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
    if base != path and (not base.is_dir() or not os.access(base, os.W_OK | os.X_OK)):
        return [(key, f"{path} cannot be created: {base} is not a directory this user may write; "
                 "allowed: a path perflab can create")]
    return []


class TargetSettings(StrictModel):
    kind: str


@dataclass
class Endpoint(abc.ABC):
    """How a workload reaches a provisioned target.

    `dialect` names the SQL dialect ("postgres", "duckdb"); `read_only` is set
    when perflab may not write to it (an external database without
    allow_destructive), and then every session it opens is read-only.
    `fresh` is true when the target's data was created anew by this provision,
    so any data prepared earlier is gone.
    """

    dialect: str
    read_only: bool = False
    fresh: bool = True
    info: dict[str, Any] = field(default_factory=dict)

    @abc.abstractmethod
    def connect(self) -> Any:
        """A new DB-API connection in autocommit mode."""

    @abc.abstractmethod
    def display(self) -> str:
        """Where it is, with any password masked."""


class Target(abc.ABC):
    """A system under test. The runner keeps one alive across runs while its
    `identity` is unchanged and calls `reconfigure` with each run's settings."""

    Settings: ClassVar[type[TargetSettings]]
    # The SQL dialect its endpoints speak; workloads list the dialects they drive.
    dialect: ClassVar[str]

    def __init__(self, settings: Any, workdir: Path) -> None:
        self.settings = settings
        self.workdir = workdir

    @classmethod
    def identity(cls, settings: Any) -> str:
        """Settings that define *which* system this is; runs with the same
        identity share one provisioned target. Default: everything."""
        return settings.model_dump_json()

    @classmethod
    def validate_for_workload(cls, settings: Any, workload: Any) -> list[tuple[str, str]]:
        """Problems (dotted path, text) with running `workload` on this target,
        found before anything starts. Default: none."""
        return []

    @classmethod
    def preflight(cls, settings: Any, base_dir: Path) -> list[tuple[str, str]]:
        """Problems (dotted path, text) that provisioning would meet, found
        without starting or changing anything: binaries and paths the settings
        name, the privileges it needs. `perflab check`, `plan` and `run` all
        ask, so check never passes what run then refuses. Default: none."""
        return []

    @abc.abstractmethod
    def provision(self) -> Endpoint:
        """Make the target reachable with `self.settings`."""

    @abc.abstractmethod
    def reconfigure(self, settings: Any) -> bool:
        """Apply a run's settings; return True when the server was restarted."""

    @abc.abstractmethod
    def teardown(self) -> None:
        """Stop whatever this target started. Safe to call twice."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Version, effective settings, pids, paths: stored with every run."""

    def begin_run(self, run_dir: Path) -> None:  # noqa: B027 - optional hook
        """Called before each run (e.g. to mark where the run's server log starts)."""

    def end_run(self, run_dir: Path) -> None:  # noqa: B027 - optional hook
        """Called after each run, failed or not (e.g. to keep the run's server log)."""

    def log_tail(self, lines: int = 40) -> str | None:
        """The server log's last lines, for a failed run's record."""
        return None

    def processes(self) -> dict[int, str]:
        """The target's processes: pid -> role, for the process collector."""
        return {}

    def data_paths(self) -> dict[str, Path]:
        """Where the target keeps data ("data", "wal"), for the disk collector."""
        return {}

    def check_alive(self) -> str | None:
        """None when the server is up, else what is wrong (crashed, gone)."""
        return None
