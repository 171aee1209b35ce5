"""perflab: a performance laboratory for database and network servers on Linux."""

from __future__ import annotations

__version__ = "0.1.0"


def _check_engine() -> None:
    """The native engine must come from the same build as this package."""
    try:
        from perflab import _engine
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "perflab's native engine (perflab._engine) is not built; run `./dev setup`"
        ) from exc
    if _engine.__version__ != __version__:
        raise ImportError(
            f"perflab {__version__} found engine {_engine.__version__}: stale build; run `./dev setup`"
        )


_check_engine()

__all__ = ["__version__"]
