"""The bundle format every runner reads: bundle.json's schema version, reading it, and
the error a bundle raises.

The runners and runtime/__init__.py's `open` share this one check of the format; it
imports no runtime module, so none of them forms an import circle through it.

`read_json` is how the runtime reads a JSON file that may come from elsewhere (a
bundle copied in, a chat file): a regular file, never waited on as a FIFO, capped in
size, and refused when json's recursion gives out. The runtime imports nothing of
kiln (a bundle runs where kiln is not), so these are kiln.catalog.yaml's caps restated.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

BUNDLE_SCHEMA = 1  # what builders write (builders/*/bundle.py) and this runtime reads
TEXT_GENERATION = "text-generation"  # the task of a bundle.json without "task"


class BundleError(Exception):
    """A request the bundle cannot serve, said in the user's terms."""


def task_of(meta: dict[str, Any]) -> str:
    """The bundle's task. Causal-LM bundles predate tasks and carry none."""
    return str(meta.get("task", TEXT_GENERATION))


MAX_JSON_BYTES = 16 << 20  # bundle.json is a few KB


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file, or a BundleError saying why it cannot be one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise BundleError(f"{path} is {st.st_size:,} bytes; at most {limit:,}")
        raw = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise BundleError(f"{path} nests too deeply to be read") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{path} is not UTF-8 JSON: {exc}") from None


def read_meta(path: Path, task: str | None = None) -> dict[str, Any]:
    """bundle.json of the bundle at `path`, refused when it is missing, unreadable, of
    another schema version, or (given `task`) of another task."""
    meta_path = path / "bundle.json"
    if not meta_path.is_file():
        raise BundleError(f"{path} is not a bundle: bundle.json is missing")
    meta = read_json(meta_path)
    if not isinstance(meta, dict):
        raise BundleError(f"{meta_path} holds a {type(meta).__name__}, not an object")
    version = meta.get("schema_version")
    newer = isinstance(version, int) and not isinstance(version, bool) and version > BUNDLE_SCHEMA
    if newer:
        raise BundleError(
            f"{path}: bundle schema {version} is newer than this runtime reads "
            f"({BUNDLE_SCHEMA}); run it with the kiln checkout that built it, or rebuild "
            "the bundle with this one"
        )
    if version != BUNDLE_SCHEMA or isinstance(version, bool):  # True == 1
        raise BundleError(
            f"{path}: bundle schema {version!r} is not supported (this runtime reads "
            f"{BUNDLE_SCHEMA}); rebuild the bundle"
        )
    if task is not None and task_of(meta) != task:
        raise BundleError(f"{path} is a {task_of(meta)} bundle, not {task}")
    return meta


def default_threads() -> int:
    """Intra-op threads when the caller names none: OMP_NUM_THREADS where it is set (a
    build sets it to the cores free for the step), else up to 4 of this machine's."""
    import os

    value = os.environ.get("OMP_NUM_THREADS", "")
    return int(value) if value.isdigit() and int(value) > 0 else min(4, os.cpu_count() or 1)
