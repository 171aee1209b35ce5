"""The optional libraries perflab's kinds need, and the extra that installs each.

A target, workload or collector names the modules it imports in its registry
line (`Registry.register(..., needs=(...))`); the Ray driver needs `ray`.
`perflab check` refuses an experiment whose kinds need a library that does
not import, naming the extra (`pip install 'perflab[mysql]'`), and `perflab
list` shows each library's state, so a missing one is never found out at a
server's readiness probe. A library is present when it imports: a module
that is on the path but fails to import (a broken install) is missing too.
"""

from __future__ import annotations

import importlib
import warnings
from functools import cache

# module -> (the distribution's name, the extra that installs it; None: a dependency of perflab itself)
LIBRARIES: dict[str, tuple[str, str | None]] = {
    "pymysql": ("PyMySQL", "mysql"),
    "ray": ("Ray", "ray"),
    "pgserver": ("pgserver", "pgserver"),
    "duckdb": ("duckdb", None),
    "pyarrow": ("pyarrow", None),
    "matplotlib": ("matplotlib", None),
}


@cache
def missing(module: str) -> str | None:
    """Why `module` does not import, or None when it does."""
    try:
        with warnings.catch_warnings():  # what a library says while it loads is not perflab's to show
            warnings.simplefilter("ignore")
            importlib.import_module(module)
    except ImportError as exc:
        return str(exc) or type(exc).__name__
    return None


def install_hint(module: str) -> str:
    dist, extra = LIBRARIES.get(module, (module, None))
    if extra is None:
        return f"pip install --force-reinstall perflab (perflab depends on {dist})"
    return f"pip install 'perflab[{extra}]' (the {extra} extra installs {dist})"


def problem(module: str, who: str) -> str | None:
    """`who` needs `module`: None when it imports, else one line naming the fix."""
    why = missing(module)
    if why is None:
        return None
    dist = LIBRARIES.get(module, (module, None))[0]
    return f"{who} needs the Python library {dist}, which does not import here ({why}); fix: {install_hint(module)}"
