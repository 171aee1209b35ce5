"""The report's sections, one module each, each registered by declaration
(`base.register`): the report shows every module's sections here in rank
order, and a new section is a new module, with no list to add it to."""

from __future__ import annotations

import importlib
import pkgutil

from perflab.report.sections.base import SECTIONS, ReportSection


def ordered() -> list[ReportSection]:
    """One of each section, the lowest rank first (every module in this
    package is imported: importing it registers its sections)."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return [cls() for cls in sorted(SECTIONS, key=lambda cls: cls.rank)]
