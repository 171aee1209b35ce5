"""Name registries for the extension points (targets, workloads, collectors).

Each entry is a name, where its class lives, and a one-line description for
`perflab list`. Targets and collectors are one line each in their package's
`__init__`; their classes are imported only when used, so a kind's heavy
dependencies cost nothing to experiments that don't use it. A registry made
with `package=` (the workloads) is filled by declaration instead: each module
of that package says `@REGISTRY.declare(name, description)` on its class, and
the first lookup imports the package's modules (a new kind is its module and
nothing else). The runner looks kinds up here and never branches on a name.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # "module:Class"
    description: str
    needs: tuple[str, ...] = ()  # the optional libraries (modules) it imports: perflab.extras


class Registry:
    def __init__(self, what: str, package: str | None = None) -> None:
        self.what = what
        self._entries: dict[str, Entry] = {}
        # the package whose modules declare the entries, until they are imported
        self._package = package

    def _discover(self) -> None:
        """Import every module of the package once: their `declare` fills the registry."""
        if self._package is None:
            return
        package, self._package = self._package, None
        try:
            for module in pkgutil.iter_modules(importlib.import_module(package).__path__):
                importlib.import_module(f"{package}.{module.name}")
        except BaseException:
            self._package = package  # a failed import is seen again at the next lookup
            raise

    def declare(self, name: str, description: str, needs: tuple[str, ...] = ()) -> Callable[[T], T]:
        """A class decorator: register the class under `name`, from its own module."""
        def declared(cls: T) -> T:
            self.register(name, f"{cls.__module__}:{cls.__qualname__}", description, needs)
            return cls
        return declared

    def register(self, name: str, path: str, description: str, needs: tuple[str, ...] = ()) -> None:
        if name in self._entries and self._entries[name].path != path:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._entries[name] = Entry(name, path, description, needs)

    def library_problems(self, name: str) -> list[str]:
        """One line per library `name` needs that does not import, naming the extra to install."""
        self._discover()
        from perflab.extras import problem

        return [p for module in self._entries[name].needs
                if (p := problem(module, f"{self.what} {name!r}")) is not None]

    def __contains__(self, name: object) -> bool:
        self._discover()
        return name in self._entries

    def names(self) -> list[str]:
        self._discover()
        return sorted(self._entries)

    def in_registration_order(self) -> list[str]:
        """Names in the order their lines stand in the registry module (the
        order a report shows them in, e.g. the machine before the server)."""
        self._discover()
        return list(self._entries)

    def entries(self) -> list[Entry]:
        self._discover()
        return [self._entries[n] for n in self.names()]

    def get(self, name: str) -> Any:
        self._discover()
        entry = self._entries[name]
        module_name, _, attr = entry.path.partition(":")
        return getattr(importlib.import_module(module_name), attr)
