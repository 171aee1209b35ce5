"""The runner's driver for each run, as [driver] says: the engine here
(perflab.drivers.LOCAL) or Ray actors (perflab.drivers.ray), the one module
that names both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perflab.drivers import LOCAL, EngineDriver


class Drivers:
    """The runner's driver for each run: one open at a time, reopened only
    when [driver]'s kind, address or workers change; closed at the end."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.key: tuple[Any, ...] | None = None
        self.driver: EngineDriver = LOCAL

    def get(self, settings: Any) -> EngineDriver:
        key = (settings.kind, settings.address, settings.workers)
        if key != self.key:
            self.close()
            if settings.kind == "ray":
                from perflab.drivers.ray import RayDriver

                self.driver = RayDriver(settings.address, settings.workers, self.say)
            self.key = key
        return self.driver

    def close(self) -> None:
        driver, self.driver, self.key = self.driver, LOCAL, None
        driver.close()
