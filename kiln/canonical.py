"""Canonical JSON and the keys made from it.

Sorted keys, no insignificant whitespace, UTF-8, and a newline at the end of files:
the same data always gives the same bytes, so hashes over it are stable. Floats are
written by repr, which round-trips exactly.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def dumps(obj: Any) -> bytes:
    """Bytes to hash: compact and sorted."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def pretty(obj: Any) -> bytes:
    """Bytes to commit: sorted and indented for reviewable diffs, newline at the end."""
    return (json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def key_of(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj`."""
    return hashlib.sha256(dumps(obj)).hexdigest()
