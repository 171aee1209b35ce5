"""The base of every settings model in an experiment file: unknown keys are
errors, values are not coerced across types (TOML has types; "8" is not 8),
and a float is finite (TOML's inf and nan, or 1e400, measure nothing)."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


def _no_nul(value: str) -> str:
    # The operating system cannot take a path or user name with a NUL in it.
    if "\x00" in value:
        raise ValueError(f"got {value!r}; allowed: a path or name without NUL characters")
    return value


# A file system path or an OS user name, as the experiment file gives it.
OsText = Annotated[str, AfterValidator(_no_nul)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
