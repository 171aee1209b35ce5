"""Name registries for the extension points (targets, workloads, collectors).

Each entry is one line: a name, where its class lives, and a one-line
description for `perflab list`. Classes are imported only when used, so a
workload's heavy dependencies cost nothing to experiments that don't use it.
The runner looks kinds up here and never branches on a name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # "module:Class"
    description: str
    needs: tuple[str, ...] = ()  # the optional libraries (modules) it imports: perflab.extras


class Registry:
    def __init__(self, what: str) -> None:
        self.what = what
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, path: str, description: str, needs: tuple[str, ...] = ()) -> None:
        if name in self._entries:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._entries[name] = Entry(name, path, description, needs)

    def library_problems(self, name: str) -> list[str]:
        """One line per library `name` needs that does not import, naming the extra to install."""
        from perflab.extras import problem

        return [p for module in self._entries[name].needs
                if (p := problem(module, f"{self.what} {name!r}")) is not None]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def in_registration_order(self) -> list[str]:
        """Names in the order their lines stand in the registry module (the
        order a report shows them in, e.g. the machine before the server)."""
        return list(self._entries)

    def entries(self) -> list[Entry]:
        return [self._entries[n] for n in self.names()]

    def get(self, name: str) -> Any:
        entry = self._entries[name]
        module_name, _, attr = entry.path.partition(":")
        return getattr(importlib.import_module(module_name), attr)
