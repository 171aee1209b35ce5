"""The base of every settings model in an experiment file: unknown keys are
errors, and values are not coerced across types (TOML has types; "8" is not 8)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
