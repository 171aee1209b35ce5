"""Which MariaDB server binaries (mariadbd, mariadb-install-db), of which version."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from perflab.errors import UserError

SERVER_BIN = "mariadbd"
INSTALL_BIN = "mariadb-install-db"
# Where Debian and most builds put them when PATH (a user's, without sbin) does not say.
SEARCH_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/mysql/bin")


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_binaries(bin_dir: str | None) -> tuple[Path, Path]:
    """(mariadbd, mariadb-install-db): from bin_dir (or its sibling sbin or bin), else
    PATH and the usual sbin directories."""
    if bin_dir:
        d = Path(bin_dir)
        # a bin directory's sibling sbin (Debian: mariadbd in /usr/sbin, mariadb-install-db in /usr/bin)
        sibling = {"bin": d.parent / "sbin", "sbin": d.parent / "bin"}.get(d.name)
        found = [next((p for p in (d / name, sibling / name if sibling else None) if p and _executable(p)), None)
                 for name in (SERVER_BIN, INSTALL_BIN)]
        if found[0] is None or found[1] is None:
            raise UserError(f"target.bin_dir: {d} has no {SERVER_BIN} and {INSTALL_BIN}",
                            "point target.bin_dir at a MariaDB bin directory, or remove it to let perflab search")
        return found[0], found[1]
    path = os.environ.get("PATH", "") + ":" + ":".join(SEARCH_DIRS)
    server, install = shutil.which(SERVER_BIN, path=path), shutil.which(INSTALL_BIN, path=path)
    if server is None or install is None:
        raise UserError(f"no MariaDB server binaries ({SERVER_BIN} and {INSTALL_BIN} on PATH or in "
                        f"{', '.join(SEARCH_DIRS)})",
                        "install MariaDB (apt-get install mariadb-server; ./dev setup does), or set target.bin_dir")
    return Path(server), Path(install)


@functools.lru_cache(maxsize=16)
def _version_text(server: str, mtime_ns: int) -> str | None:
    try:
        out = subprocess.run([server, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"Ver\s+(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else None


def server_version(server: Path) -> str | None:
    """"10.11.19" as `mariadbd --version` says it."""
    try:
        return _version_text(str(server), server.stat().st_mtime_ns)
    except OSError:
        return None


def version_label(bin_dir: str | Path) -> str | None:
    """"MariaDB 10.11.19" for a bin directory holding a mariadbd that runs here, else None."""
    try:
        server, _ = find_binaries(str(bin_dir))
    except UserError:
        return None
    version = server_version(server)
    return f"MariaDB {version}" if version else None

