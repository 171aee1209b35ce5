"""The setting check: names and values of target.settings that this
PostgreSQL build would refuse at start, found by `perflab check` before any
run. Checked against the server binary's own list (`postgres
--describe-config`); a name it leaves out is asked of the binary itself
(`postgres -C NAME`): developer options such as debug_io_direct are taken,
with a note, and io_method's words depend on the build (io_uring needs
liburing), which `check` says."""

from __future__ import annotations

import difflib
import functools
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from perflab.errors import UserError
from perflab.targets.postgres.binaries import find_bin_dir, version_of
from perflab.targets.postgres.settings import PostgresSettings, SettingValue
from perflab.targets.postgres.users import as_user
from perflab.targets.serverhome import resolve_run_as
from perflab.targets.serverproc import server_env

# Units PostgreSQL accepts after a number (docs: "Parameter Names and Values").
SETTING_UNITS = ("B", "kB", "MB", "GB", "TB", "us", "ms", "s", "min", "h", "d")
NUMBER_WITH_UNIT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*(" + "|".join(SETTING_UNITS) + r")?\s*$")
BOOLEAN_WORDS = ("on", "off", "true", "false", "yes", "no", "1", "0")


@dataclass(frozen=True)
class ServerSetting:
    name: str
    vartype: str  # BOOLEAN, INTEGER, REAL, ENUM, STRING
    minimum: float | None
    maximum: float | None


@functools.lru_cache(maxsize=8)
def server_settings(bin_dir: Path) -> tuple[str, dict[str, ServerSetting]]:
    """The settings this PostgreSQL build knows, from `postgres
    --describe-config` (it needs no data directory and no running server),
    with its version: ("16.4", {name: ServerSetting})."""
    out = subprocess.run([str(bin_dir / "postgres"), "--describe-config"], capture_output=True, text=True,
                         timeout=30, env={**os.environ, "LC_ALL": "C"}).stdout
    known = {}
    for line in out.splitlines():
        fields = line.split("\t")
        if len(fields) < 7:
            continue

        def number(text: str) -> float | None:
            try:
                return float(text)
            except ValueError:
                return None

        known[fields[0]] = ServerSetting(fields[0], fields[3], number(fields[5]), number(fields[6]))
    version = ".".join(map(str, version_of(bin_dir) or ())) or "?"
    return version, known


@functools.lru_cache(maxsize=8)
def _bin_dir_for_check(explicit: str | None, run_as: str | None, version: str | None = None) -> Path | None:
    try:
        return find_bin_dir(explicit, run_as, version)
    except (UserError, OSError):
        # the preflight says what is wrong with the path (missing, too long),
        # and provisioning what is missing, each with its fix
        return None


@dataclass(frozen=True)
class _Server:
    """The binary a target's settings are checked against, its user, and what it knows."""

    bin_dir: Path
    run_as: str | None
    version: str
    known: dict[str, ServerSetting]


def _server_for(settings: PostgresSettings) -> _Server | None:
    """The server a managed target would run, for the check; None when there
    is nothing to check or it cannot be found (the preflight says what is
    wrong with the path or the user, and provisioning what is missing)."""
    if not settings.settings:
        return None
    try:
        run_as = resolve_run_as(settings.run_as)
    except UserError:
        return None  # said when the target is provisioned
    bin_dir = _bin_dir_for_check(settings.bin_dir, run_as, settings.version)
    if bin_dir is None:
        return None
    version, known = server_settings(bin_dir)
    return _Server(bin_dir, run_as, version, known) if known else None


def setting_problems(settings: PostgresSettings) -> list[tuple[str, str]]:
    """Names and values of target.settings that this PostgreSQL would refuse
    at start: checked against the server binary's own list, so `perflab check`
    catches a typo before any run (dotted names are extensions' own settings,
    which the server takes as they are)."""
    server = _server_for(settings)
    if server is None:
        return []
    bin_dir, run_as, version, known = server.bin_dir, server.run_as, server.version, server.known
    problems = []
    for name, value in settings.settings.items():
        path = f"target.settings.{name}"
        if "." in name:
            continue
        info = known.get(name)
        if info is None:
            # --describe-config leaves out developer options (debug_io_direct,
            # debug_discard_caches, ...): the server itself says whether it knows the name
            verdict, text = probe_setting(bin_dir, run_as, name, _probe_value(value))
            if verdict == "invalid":
                problems.append((path, f"got {json.dumps(value)}; PostgreSQL {version} says: {text}"))
            if verdict != "unknown":
                continue
            names = list(known) + [n for n in DEVELOPER_OPTIONS if n != name
                                   and difflib.get_close_matches(name, [n], n=1)
                                   and probe_setting(bin_dir, run_as, n, None)[0] == "ok"]
            close = difflib.get_close_matches(name, names, n=1)
            since = NEWER_SETTINGS.get(name)
            if since is not None and (version_of(bin_dir, run_as) or (0,))[0] < since:
                # a real setting of a newer server: say which, not the nearest name this one has
                hint = (f"{name} came in PostgreSQL {since}; set it on a version that has it (target.version = "
                        f"\"{since}\" or newer), or vary the whole target, one table per version with its settings")
            else:
                hint = f"did you mean {close[0]}?" if close else "see `postgres --describe-config` for the names"
            problems.append((path, f"got {name!r}: PostgreSQL {version} has no such setting; {hint}"))
            continue
        problem = _value_problem(info, value)
        if problem is None and info.vartype == "ENUM":
            # the allowed words depend on the build (io_method = io_uring needs liburing): ask the server
            verdict, text = probe_setting(bin_dir, run_as, name, _probe_value(value))
            if verdict == "invalid":
                problems.append((path, f"got {json.dumps(value)}; PostgreSQL {version} says: {text}"))
            continue
        if problem:
            problems.append((path, f"got {json.dumps(value)}; allowed: {problem} (PostgreSQL {version})"))
    return problems


# Settings a performance study may set that only newer servers have, with the
# major version that brought each: on an older server the refusal says so,
# rather than offering the nearest name that server has.
NEWER_SETTINGS = {"debug_io_direct": 16, "vacuum_buffer_usage_limit": 16, "io_combine_limit": 17,
                  "summarize_wal": 17, "transaction_timeout": 17, "io_method": 18, "io_workers": 18,
                  "io_max_concurrency": 18, "io_max_combine_limit": 18}


# PostgreSQL's "Developer Options" (the documentation's section of that
# name, through version 18), offered as "did you mean" where the server knows
# them: they are not in `postgres --describe-config`, so a misspelling has
# nothing else to match. Other settings are left out of that list too
# (application_name, ...: not in the sample file), and are no developer options.
DEVELOPER_OPTIONS = ("allow_in_place_tablespaces", "allow_system_table_mods", "backtrace_functions",
                     "debug_copy_parse_plan_trees", "debug_deadlocks", "debug_discard_caches",
                     "debug_io_direct", "debug_logical_replication_streaming", "debug_parallel_query",
                     "debug_raw_expression_coverage_test", "debug_write_read_parse_plan_trees",
                     "force_parallel_mode", "ignore_checksum_failure", "ignore_invalid_pages",
                     "ignore_system_indexes", "jit_debugging_support", "jit_dump_bitcode", "jit_expressions",
                     "jit_profiling_support", "jit_tuple_deforming", "log_btree_build_stats", "post_auth_delay",
                     "pre_auth_delay", "remove_temp_files_after_crash", "send_abort_for_crash",
                     "send_abort_for_kill", "trace_lock_oidmin", "trace_lock_table", "trace_locks",
                     "trace_lwlocks", "trace_notify", "trace_recovery_messages", "trace_sort", "trace_userlocks",
                     "wal_consistency_checking", "wal_debug", "zero_damaged_pages")


def is_developer_option(name: str) -> bool:
    """Whether `name` is one of PostgreSQL's developer options (by the
    documentation's list; a newer one by its debug_ or trace_ prefix)."""
    return name in DEVELOPER_OPTIONS or name.startswith(("debug_", "trace_"))


def developer_options(settings: PostgresSettings) -> list[str]:
    """The names in target.settings that this PostgreSQL knows only as
    developer options (absent from `postgres --describe-config`, known to
    `postgres -C`, and of that group): `check` says so, since they are meant
    for testing the server and may change between versions."""
    server = _server_for(settings)
    if server is None:
        return []
    return [name for name, value in settings.settings.items()
            if "." not in name and name not in server.known and is_developer_option(name)
            and probe_setting(server.bin_dir, server.run_as, name, _probe_value(value))[0] == "ok"]


def io_method_notes(settings: PostgresSettings) -> list[str]:
    """Whether io_uring is there for io_method (PostgreSQL 18+ built with
    liburing), said by `check` wherever io_method is set: the server's own
    answer to `postgres -C io_method -c io_method=io_uring`."""
    server = _server_for(settings)
    if "io_method" not in settings.settings or server is None or "io_method" not in server.known:
        return []  # a server without io_method refuses it in setting_problems, naming its version
    bin_dir, version = server.bin_dir, server.version
    verdict, text = probe_setting(bin_dir, server.run_as, "io_method", "io_uring")
    if verdict == "ok":
        return [f"target.settings.io_method: PostgreSQL {version} ({bin_dir}) was built with liburing: "
                "io_uring is available"]
    if verdict == "invalid":
        allowed = re.search(r"Available values: ([^.;]*)", text)
        return [f"target.settings.io_method: PostgreSQL {version} ({bin_dir}) was built without liburing: "
                f"io_uring is not available (allowed: {allowed[1] if allowed else 'sync, worker'}); "
                "a build with liburing (e.g. apt.postgresql.org's postgresql-18) has it"]
    return []


def _probe_value(value: SettingValue) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def probe_setting(bin_dir: Path, user: str | None, name: str, value: str | None) -> tuple[str, str]:
    """Ask the server binary itself about one setting: `postgres -C NAME -c
    NAME=VALUE` against a throwaway, empty configuration (no cluster, no
    server started). ("ok", the value it would use), ("unknown", its message),
    ("invalid", its message and hint), or ("error", why it could not tell)."""
    return _probe_setting(str(bin_dir), user, name, value)


@functools.lru_cache(maxsize=256)
def _probe_setting(bin_dir_text: str, user: str | None, name: str, value: str | None) -> tuple[str, str]:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return "unknown", f"{name!r} is not a setting name"
    conf_dir = Path(tempfile.mkdtemp(prefix="perflab-guc-"))
    try:
        (conf_dir / "postgresql.conf").write_text("")
        if user is not None:
            pw = pwd.getpwnam(user)
            for p in (conf_dir, conf_dir / "postgresql.conf"):
                os.chown(p, pw.pw_uid, pw.pw_gid, follow_symlinks=False)
        argv = [str(Path(bin_dir_text) / "postgres"), "-D", str(conf_dir), "-C", name]
        if value is not None:
            argv += ["-c", f"{name}={value}"]
        try:
            # as the server's user, with nothing of perflab's environment (its /proc/PID/environ is that user's)
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=server_env(user=user),
                                  **as_user(user))
        except (OSError, subprocess.SubprocessError) as exc:
            return "error", str(exc)
    finally:
        shutil.rmtree(conf_dir, ignore_errors=True)
    if proc.returncode == 0:
        return "ok", proc.stdout.strip()
    lines = [re.sub(r"^.*?\b(FATAL|ERROR|HINT|DETAIL):\s*", "", ln) for ln in proc.stderr.splitlines()
             if re.search(r"\b(FATAL|ERROR|HINT|DETAIL):", ln)]
    text = "; ".join(lines) or proc.stderr.strip()[-300:]
    if "unrecognized configuration parameter" in proc.stderr:
        return "unknown", text
    if "invalid value for parameter" in proc.stderr:
        return "invalid", text
    return "error", text


def _value_problem(info: ServerSetting, value: SettingValue) -> str | None:
    if info.vartype == "BOOLEAN":
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return None
        text = str(value).strip().lower()
        # PostgreSQL takes any unambiguous prefix of its boolean words
        if text and len([w for w in BOOLEAN_WORDS if w.startswith(text)]) == 1:
            return None
        return "a boolean: on, off, true, false, yes, no, 1 or 0"
    if info.vartype in ("INTEGER", "REAL"):
        if isinstance(value, bool):
            return "a number"
        if isinstance(value, (int, float)):
            # a bare number is in the setting's base unit, which the range uses too
            low, high = info.minimum, info.maximum
            if low is not None and high is not None and not low <= value <= high:
                return f"a number from {low:g} to {high:g}"
            if info.vartype == "INTEGER" and isinstance(value, float) and not value.is_integer():
                return "a whole number"
            return None
        if not NUMBER_WITH_UNIT.match(str(value)):
            return f"a number, with a unit for a size or time ({', '.join(SETTING_UNITS)}), e.g. \"128MB\" or \"10s\""
    return None
