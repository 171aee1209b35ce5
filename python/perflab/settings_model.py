"""The base of every settings model in an experiment file: unknown keys are
errors, values are not coerced across types (TOML has types; "8" is not 8),
and a float is finite (TOML's inf and nan, or 1e400, measure nothing)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
