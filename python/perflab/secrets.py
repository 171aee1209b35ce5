"""Keeping passwords out of output, logs and the store."""

from __future__ import annotations

import re

_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'\"]+)", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/:@\s]*:)([^@\s/]*)(@)", re.IGNORECASE)
MASK = "********"


def mask_secrets(text: str) -> str:
    """Replace passwords in libpq key=value strings and in URIs (user:pass@host)."""
    text = _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, text)
    return _URI_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
