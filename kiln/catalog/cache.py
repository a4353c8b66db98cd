"""Parsed YAML, cached in the store by (path, size, mtime_ns): a second `doit check`
of an unchanged catalog parses nothing.

    <store>/cache/parse/<sha256 of the catalog root>.json
        line 1   {"format", "parser", "root", "sha256" of the rest}
        rest     {path: {size, mtime_ns, cached_ns, sha256, text, data}}
    <store>/cache/.gitignore   "*": a store inside a repository stays out of git

Only files that parse cleanly are cached, with their text and the plain data the
guarded parser built from it; a file with a problem is parsed afresh every time, so
its diagnostics are the parser's own. A hit gives back the text and the data, and
the node tree that locations need is composed again from the text only when an
error asks for it (yaml.Source); a file parsed afresh keeps no tree either.

Never trusted blindly: the file is written atomically (kiln.fsio; not durably: a
crash may lose it, never mix it) with the sha256 of
its body and the parser's version (this parser's source and PyYAML's version), and
each entry is checked for its shape and its text's sha256. Whatever does not check
out is a miss: parsed afresh and written back. An entry cached within RACY_NS of its
file's mtime may hide a same-size edit in the same clock tick (git's "racily
clean" entries), so it is confirmed against the file's bytes until it is older.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import yaml

from kiln.catalog import yaml as guarded
from kiln.catalog.yaml import Source
from kiln.errors import KilnError
from kiln.fsio import atomic_write
from kiln.paths import Paths

FORMAT = 1
RACY_NS = 2_000_000_000  # coarse file systems stamp mtimes to 1-2 s
MAX_BYTES = 256 << 20
IGNORE = b"# Created by kiln: a cache of this machine, never committed.\n*\n"
_ENTRY = {"size": int, "mtime_ns": int, "cached_ns": int, "sha256": str, "text": str}


def _parser() -> str:
    """What decides the data a file parses to: the guarded parser and PyYAML."""
    source = Path(guarded.__file__).read_bytes()
    loader = guarded.LOADER
    return hashlib.sha256(source + f"|{yaml.__version__}|{loader}".encode()).hexdigest()[:16]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ParseCache:
    """The cached parses of one catalog root, read once and written back once."""

    def __init__(self, paths: Paths, enabled: bool = True) -> None:
        self.root = str(paths.root.resolve())
        name = hashlib.sha256(self.root.encode()).hexdigest()[:24]
        self.path = paths.store / "cache" / "parse" / f"{name}.json" if enabled else None
        self.parser = _parser() if enabled else ""
        self.entries = self._read() if self.path else {}
        self.used: dict[str, dict[str, Any]] = {}
        self.changed = False
        self.hits = self.misses = 0

    # ------------------------------------------------------------ reading

    def _read(self) -> dict[str, dict[str, Any]]:
        assert self.path is not None
        try:
            if self.path.stat().st_size > MAX_BYTES:
                return {}
            head, _, body = self.path.read_bytes().partition(b"\n")
            meta = json.loads(head)
            expected = {
                "format": FORMAT,
                "parser": self.parser,
                "root": self.root,
                "sha256": hashlib.sha256(body).hexdigest(),
            }
            if meta != expected:
                return {}
            entries = json.loads(body)
        except (OSError, ValueError, RecursionError):  # a corrupt store: a miss
            return {}
        if not isinstance(entries, dict):
            return {}
        return {k: e for k, e in entries.items() if isinstance(k, str) and _sound(e)}

    def read_source(self, path: Path, file: str) -> tuple[Source, Any]:
        """What kiln.catalog.yaml.read_source returns, from the cache when the file is
        unchanged; KilnError (never cached) when it does not parse.

        Either way the Source holds the text only, its node tree composed again when an
        error asks where a key is: a catalog's trees are most of the objects a load
        leaves alive (170,000 for 1,000 recipes), which the cyclic collector, once
        loading lets it run again, walks for 60 ms finding nothing."""
        key = str(path)
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        regular = st is not None and stat.S_ISREG(st.st_mode)
        entry = self.entries.get(key)
        if (
            regular
            and st is not None
            and entry is not None
            and (entry["size"], entry["mtime_ns"]) == (st.st_size, st.st_mtime_ns)
            and self._confirmed(entry, path, file)
        ):
            self.hits += 1
            self.used[key] = entry
            return Source(file, entry["text"]), entry["data"]
        self.misses += 1
        source, data = guarded.read_source(path, file)
        if regular and st is not None and self.path is not None:
            self.used[key] = {
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "cached_ns": time.time_ns(),
                "sha256": _digest(source.text),
                "text": source.text,
                "data": data,
            }
            self.changed = True
        return Source(file, source.text), data

    def _confirmed(self, entry: dict[str, Any], path: Path, file: str) -> bool:
        """A racy entry is trusted only if the file's bytes are still the cached ones."""
        if entry["cached_ns"] - entry["mtime_ns"] >= RACY_NS:
            return True
        try:
            raw = guarded._read_capped(path, file)
        except KilnError:
            return False
        if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
            return False
        if time.time_ns() - entry["mtime_ns"] >= RACY_NS:  # old enough now: stop checking
            entry["cached_ns"] = time.time_ns()
            self.changed = True
        return True

    # ------------------------------------------------------------ writing

    def save(self) -> None:
        """Write back what this load used (entries of deleted files drop out). A cache
        that cannot be written is only slower: errors are ignored."""
        if self.path is None or not (self.changed or self.used.keys() != self.entries.keys()):
            return
        body = json.dumps(
            self.used, ensure_ascii=False, separators=(",", ":"), check_circular=False
        ).encode()  # plain data built by the guarded parser: never cyclic
        meta = {
            "format": FORMAT,
            "parser": self.parser,
            "root": self.root,
            "sha256": hashlib.sha256(body).hexdigest(),
        }
        with contextlib.suppress(OSError, KilnError):
            atomic_write(self.path, json.dumps(meta).encode() + b"\n" + body, durable=False)
            ignore = self.path.parent.parent / ".gitignore"
            if not ignore.exists():  # as pytest and mypy do: a cache is never committed
                atomic_write(ignore, IGNORE, durable=False)


def _sound(entry: Any) -> bool:
    """An entry of the shape save() writes, whose text is the one it was cached with."""
    if not isinstance(entry, dict) or entry.keys() != {*_ENTRY, "data"}:
        return False
    if not all(type(entry[k]) is t for k, t in _ENTRY.items()):
        return False
    return bool(_digest(entry["text"]) == entry["sha256"])
