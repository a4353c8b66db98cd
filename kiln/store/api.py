"""The builder contract: everything a builder may use of the core, as typed protocols.

A builder is a module with one entry point, `build(request: Request, writer: Writer)
-> None`, that kiln.store.execute imports and calls. It reads its options and input
artifacts from `request` and writes its artifact only through `writer`; nothing else
of kiln is in reach. Builders import these types under `TYPE_CHECKING` only, so a
builder never loads the core at run time, and mypy checks both sides: the concrete
Request (kiln.store.execute) and Writer (kiln.store) must satisfy these protocols.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kiln.errors import KilnError
from kiln.store.unsupported import Unsupported

T = TypeVar("T")


class Request(Protocol):
    """What one step asks of its builder. Only `options` and `inputs` are in the step's
    key; `context` says where things are (caches, recorded hashes) and must never
    change what the builder produces."""

    @property
    def kind(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def options(self) -> dict[str, Any]: ...
    @property
    def inputs(self) -> dict[str, Path]: ...
    @property
    def context(self) -> dict[str, Any]: ...

    def error(
        self, cause: str, fix: str = "", where: str | None = None, key: str | None = None
    ) -> KilnError:
        """An error the user can act on; a builder raises it for bad input. `key`: the
        key of the step's checkpoint to blame (e.g. "repo") instead of the step's own."""
        ...

    def unsupported(self, reason: str) -> Unsupported:
        """This host or this kiln cannot build the step, and exactly why; a builder
        raises it, and the step publishes an unsupported-here marker instead."""
        ...

    def log(self, message: str) -> None: ...

    def progress(self, items: Iterable[T], total: int, what: str) -> Iterator[T]:
        """`items`, showing progress on long work."""
        ...


class Writer(Protocol):
    """Where a builder writes its artifact. Paths cannot leave the artifact."""

    def path(self, name: str) -> Path:
        """A path inside the artifact (its folders made) for a library to write to."""
        ...

    def write_bytes(self, name: str, data: bytes) -> Path: ...

    def write_json(self, name: str, obj: Any) -> Path: ...

    def log(self, message: str) -> None: ...

    def evidence(
        self,
        metrics: Mapping[str, float],
        outputs: Sequence[str],
        backend: Mapping[str, Any],
        **extra: Any,
    ) -> Path:
        """evidence.json, what a validate step measured: the core stamps when and where
        (date, host) next to the backend it ran on, the metrics, and the outputs."""
        ...
