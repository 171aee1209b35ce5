"""The Target interface: how a system under test is provisioned, configured,
reached and torn down."""

from __future__ import annotations

import abc
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol

from typing_extensions import TypeVar

from perflab.endpoints import Endpoint
from perflab.settings_model import StrictModel
from perflab.targets.confine import Leftover, Owner, Removal

# How long `check` and `run` wait for an external target to answer (libpq's
# connect_timeout counts whole seconds, 2 at least).
REACH_TIMEOUT_S = 5.0
# A run directory's note of where the run's part of a log the target shares
# between runs starts ({file name: {"path": log, "offset": bytes}}), written
# by begin_run and removed by end_run once the part is copied: an attempt
# killed before end_run leaves it, and resume copies the part from it.
LOG_SLICES = "log-slices.json"


def creatable_problems(key: str, path: Path) -> list[tuple[str, str]]:
    """Whether `path` exists or can be made (its nearest existing ancestor is a
    directory this user may write), as a problem at the dotted `key`."""
    base = next((p for p in [path, *path.parents] if p.exists()), Path("/"))
    if base != path and (not base.is_dir() or not os.access(base, os.W_OK | os.X_OK)):
        return [(key, f"{path} cannot be created: {base} is not a directory this user may write; "
                 "allowed: a path perflab can create")]
    return []


@dataclass(frozen=True)
class FileClass:
    """A class of a server's files, for the syscalls collector: a file is of
    class `name` when its parent directory (depth 1) or its grandparent
    (depth 2) is `directory` and, with `prefix`, its name starts with it."""

    name: str
    directory: Path
    depth: int = 1
    prefix: str | None = None


class _Kinded(Protocol):
    kind: str


class CheckedWorkload(Protocol):
    """What a target asks of the workload it is checked against
    (`validate_for_workload`): workloads sit above targets."""

    @property
    def settings(self) -> _Kinded: ...

    def writes(self) -> bool: ...


class TargetSettings(StrictModel):
    kind: str
    # Keep the target's data (a cluster, a database file) when the experiment
    # has finished. The default drops it: the results are in the store, and a
    # cluster is most of an output directory's size. An interrupted experiment
    # always keeps it, so `perflab resume` reuses the loaded data.
    keep_data: bool = False

    def server_cpus(self) -> str | None:
        """The CPUs the server is confined to (`target.resources.cpus`), for
        a kind that confines its server; the driver is pinned apart."""
        return None


# A target kind's settings model and the endpoint its `provision` returns: a
# kind's hooks take and give its own (`class PostgresTarget(Target[
# PostgresSettings, PostgresEndpoint])`). A plain `Target` is the runner's
# view of a target of any kind, made from the registry: TargetSettings in,
# an Endpoint out.
SettingsT = TypeVar("SettingsT", bound=TargetSettings, default=TargetSettings)
EndpointT = TypeVar("EndpointT", bound=Endpoint, default=Endpoint)


class Target(abc.ABC, Generic[SettingsT, EndpointT]):
    """A system under test. The runner keeps one alive across runs while its
    `identity` is unchanged and calls `reconfigure` with each run's settings."""

    Settings: ClassVar[type[TargetSettings]]
    # What `provision` returns; its capabilities are what workloads and
    # collectors may need of this target.
    endpoint_type: ClassVar[type[Endpoint]]

    def __init__(self, settings: SettingsT, workdir: Path, base_dir: Path | None = None) -> None:
        self.settings = settings
        self.workdir = workdir
        # where the experiment file is: its relative paths are taken from here
        self.base_dir = (base_dir or Path.cwd()).resolve()
        # Called just before each start of a server (the first and every
        # restart), with the server stopped: the runner sizes host.hugepages
        # = "auto" here, from the shared memory of the settings about to start.
        self.before_start: Callable[[], None] | None = None
        # What the target did for a run that the run's events should say
        # (perflab's schema made or taken over, by `confine`); the runner
        # takes them.
        self.said: list[str] = []
        # What the target did on its way up that the user should hear once
        # (a stale server stopped, a kept cluster removed); the runner warns
        # each after `provision`.
        self.notes: list[str] = []
        # True when perflab only reaches this system (a dsn, a URL) and did
        # not start it: it has no server process of perflab's.
        self.external = False

    def path_from_file(self, given: str) -> Path:
        """A path the experiment file gives, made absolute as every path in
        the file is: relative to the file's directory, so a resume started
        from another directory finds the same place."""
        return (self.base_dir / Path(given).expanduser()).resolve()

    @classmethod
    def identity(cls, settings: SettingsT) -> str:
        """Settings that define *which* system this is; runs with the same
        identity share one provisioned target. Default: everything."""
        return settings.model_dump_json()

    @classmethod
    def sizes_huge_pages(cls, settings: SettingsT) -> bool:
        """Whether `shared_memory_huge_pages` can size host.hugepages = "auto"
        for a target with these settings. Default: no."""
        return False

    def shared_memory_huge_pages(self) -> int:
        """How many huge pages the server's shared memory needs, asked while
        it is stopped (called from `before_start`)."""
        raise NotImplementedError

    @classmethod
    def remote_client_problem(cls, settings: SettingsT) -> str | None:
        """Why a driver in a network namespace of its own (driver.network)
        cannot reach this target, or None when it can: the target then
        listens on `remote_listen` too and trusts `remote_client`. Default:
        it cannot."""
        return "it takes no client from a network namespace; driver.network works with a managed postgres target"

    @classmethod
    def reachable_off_host(cls, settings: SettingsT) -> bool:
        """Whether a driver on another machine reaches the system these
        settings give: an external server by an address of its own. Default:
        no (a server perflab starts listens on 127.0.0.1 only)."""
        return False

    def allow_remote_client(self, listen: str, client: str) -> None:
        """Listen on address `listen` too and let address `client` in (set
        before provision, for the whole experiment)."""
        raise NotImplementedError

    def remote_endpoint(self, endpoint: EndpointT, host: str, port: int) -> EndpointT:
        """`endpoint` as reached at host:port (the driver's side of the link)."""
        raise NotImplementedError

    @classmethod
    def validate_for_workload(cls, settings: SettingsT, workload: CheckedWorkload) -> list[tuple[str, str]]:
        """Problems (dotted path, text) with running `workload` on this target,
        found before anything starts. Default: none."""
        return []

    @classmethod
    def for_distributed_driver(cls, settings: SettingsT) -> tuple[SettingsT, list[tuple[str, str]], str | None]:
        """For drivers in other processes and on other machines ([driver]
        kind = "ray"), which reach the target over TCP: (the settings to use,
        problems, a note saying what was changed). Default: not reachable."""
        return settings, [("driver.kind", f"got \"ray\"; target kind {settings.kind!r} is reached only from "
                           "perflab's own process; allowed: \"local\", or a target reachable over TCP")], None

    @classmethod
    def preflight(cls, settings: SettingsT, base_dir: Path) -> list[tuple[str, str]]:
        """Problems (dotted path, text) that provisioning would meet, found
        without starting or changing anything: binaries and paths the settings
        name, the privileges it needs. `perflab check`, `plan` and `run` all
        ask, so check never passes what run then refuses. Default: none."""
        return []

    @classmethod
    def preflight_notes(cls, settings: SettingsT) -> list[str]:
        """What `perflab check` should say about these settings that is not a
        problem (e.g. which server binaries were found). Default: nothing."""
        return []

    @classmethod
    def reach(cls, settings: SettingsT, timeout_s: float = REACH_TIMEOUT_S) -> list[tuple[str, str]]:
        """Problems (dotted path, text) reaching an external system under test
        that perflab does not start (a PostgreSQL `dsn`, a web server's URL):
        connect once, within `timeout_s`, and change nothing. `perflab check`,
        and `run` before it creates the output directory, ask; a wrong
        password or a server that is down then costs no directory and no
        planned run. Default: nothing external to reach."""
        return []

    @abc.abstractmethod
    def provision(self) -> EndpointT:
        """Make the target reachable with `self.settings`."""

    @abc.abstractmethod
    def reconfigure(self, settings: SettingsT) -> bool:
        """Apply a run's settings; return True when the server was restarted."""

    @abc.abstractmethod
    def teardown(self) -> None:
        """Stop whatever this target started. Safe to call twice."""

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """Version, effective settings, pids, paths: stored with every run."""

    def begin_run(self, run_dir: Path) -> None:  # noqa: B027 - optional hook
        """Called before each run (e.g. to mark where the run's server log
        starts, in run_dir / LOG_SLICES, so a killed attempt's part is found)."""

    def end_run(self, run_dir: Path) -> None:  # noqa: B027 - optional hook
        """Called after each run, failed or not (e.g. to keep the run's server log)."""

    def data_locations(self) -> list[Path]:
        """Where this target keeps data perflab made (for keep_data = true)."""
        return []

    def discard_data(self) -> int:
        """Remove the data perflab made for this target (never anything it did
        not make); the target is stopped. Returns the bytes freed."""
        return 0

    def confine(self, endpoint: EndpointT, schema: str, owner: Owner) -> EndpointT:
        """The endpoint a workload that writes uses in this run. On a database
        perflab did not create, it is confined to perflab's own schema
        `schema` (perflab.targets.confine): made and marked as `owner`'s
        here, or already perflab's; a schema of that name that is not
        perflab's is a UserError. Default: `endpoint` as it is (a database
        perflab created is all its own)."""
        return endpoint

    def leftovers(self) -> list[Leftover]:
        """What this target's `confine` made outside the output directory,
        measured now (schemas that stay after the experiment). Default: none."""
        return []

    def remove_leftover(self, leftover: dict[str, Any], owner: Owner) -> Removal:
        """Remove a leftover the store recorded (`perflab clean`), only while
        it is still marked as `owner`'s."""
        return Removal(False, f"{leftover['name']} in {leftover['location']}: this target cannot remove it")

    def log_tail(self, lines: int = 40) -> str | None:
        """The server log's last lines, for a failed run's record."""
        return None

    def processes(self) -> dict[int, str]:
        """The target's processes: pid -> role, for the process collector."""
        return {}

    def server_pid(self) -> int | None:
        """The main process of the server perflab started (PostgreSQL's
        postmaster; the others descend from it), for the tracers; None when
        there is none of perflab's (external, not running). Default: none."""
        return None

    def data_paths(self) -> dict[str, Path]:
        """Where the target keeps data ("data", "wal"), for the disk collector."""
        return {}

    def resource_usage(self) -> dict[str, float]:
        """The counters of the limits the target runs under (a managed server's
        cgroup: perflab.hostctl.cgroups.ServerCgroup.stats), read before and
        after the measured window. Default: none."""
        return {}

    def file_classes(self) -> list[FileClass]:
        """The classes of the server's files, first match first, for the
        syscalls collector. Default: none (the collector then classifies
        PostgreSQL's from data_paths: wal, base, global)."""
        return []

    def check_alive(self) -> str | None:
        """None when the server is up, else what is wrong (crashed, gone)."""
        return None
