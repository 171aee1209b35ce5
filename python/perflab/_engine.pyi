"""Typed stub of perflab._engine, the Rust extension (crates/engine-py)."""

__version__: str
build_profile: str

def parse_duration_s(text: str) -> float:
    """Seconds in "90s", "1h30m", "250ms"; ValueError says what is allowed."""
