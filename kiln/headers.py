"""A GGUF's header, walked before gguf's reader believes it (issue 37).

gguf.GGUFReader trusts every count and length a header declares: a forged one gives
IndexError or ValueError from deep inside numpy, an array of arrays ran it to 15 GiB in
100 s, and it builds numpy views per array element (measured: 2^20 one-byte elements took
9.9 s and 777 MiB, 500,000 strings 8.9 s and 732 MiB). This walks the same fields with
`struct` alone and checks each count and length against a cap and against the bytes left
in the file before it reads past them, so nothing is sized by what the file says.
The layout, as gguf/gguf_reader.py reads it (little-endian, or all byte-swapped):

  "GGUF"  u32 version (2 or 3)  u64 tensor count  u64 metadata count
  metadata count x   string key, u32 value type, value
      value:  a scalar (1, 2, 4 or 8 bytes, by type), a string, or an array:
              u32 element type, u64 count, count values (never arrays: llama.cpp's
              gguf.cpp refuses arrays of arrays, and gguf's reader recurses on them)
  tensor count x     string name, u32 dimension count, u64 per dimension, u32 type,
                     u64 data offset
  string:  u64 length, then that many bytes
"""

from __future__ import annotations

import os
import stat
import struct
from typing import BinaryIO

# Caps: far above any GGUF published, far below what the reader survives.
MAX_TENSORS = 65_536  # 128 experts x 3 x 35 layers, as per-expert tensors, is 13,440
MAX_ENTRIES = 65_536  # llama.cpp files carry a few dozen metadata entries
MAX_KEY = 64 * 1024  # a key or a tensor name; llama.cpp's names stop at 64 bytes
# All arrays together: Gemma 3's tokenizer (262,144 tokens with scores and types, 786,432
# elements) fits, and the reader stays near 10 s and 800 MiB (1.5 GiB if all are strings).
MAX_ELEMENTS = 1 << 20
MAX_DIMS = 4  # GGML_MAX_DIMS

STRING, ARRAY = 8, 9
SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
HEADER_BYTES = 24  # magic, version, the two counts
MIN_ENTRY_BYTES = 8 + 4 + 1  # an empty key, a type, a one-byte value
MIN_TENSOR_BYTES = 8 + 4 + 4 + 8  # an empty name, no dimensions, a type, an offset


class UnreadableHeader(ValueError):
    """A GGUF header no reader should believe; the message says what and at which byte."""


def check_gguf(path: str | os.PathLike[str]) -> None:
    """Raise UnreadableHeader unless `path` is a regular file whose GGUF header (metadata
    and tensor infos) fits its caps and its own length."""
    # O_NONBLOCK: a FIFO named like a .gguf must not hang the open; regular files ignore it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableHeader("it is not a regular file")
        _Walk(f, info.st_size).header()


def shown(name: str) -> str:
    """A key or tensor name short enough to quote in a reason (they run to 64 KiB)."""
    return name if len(name) <= 80 else name[:77] + "..."


def known(kind: int, key: str, at: int) -> None:
    if kind != STRING and kind not in SCALAR_BYTES:
        raise UnreadableHeader(
            f"metadata {key!r} at byte {at:,} has value type {kind}, which GGUF does not "
            "define (0 to 12)"
        )


class _Walk:
    """One pass over a header through a file object that never reads past its size."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.size, self.pos = f, size, 0
        self.order = "<"
        self.elements = 0  # array elements so far, against MAX_ELEMENTS

    def header(self) -> None:
        if self.size < HEADER_BYTES:
            raise UnreadableHeader(f"it is {self.size:,} bytes, too short for a GGUF header")
        magic = self.take(4, "the magic")
        if magic != b"GGUF":
            raise UnreadableHeader(f"it starts with {magic!r}, not the GGUF magic b'GGUF'")
        self.version()
        tensors = self.count("tensors", MAX_TENSORS, MIN_TENSOR_BYTES)
        entries = self.count("metadata entries", MAX_ENTRIES, MIN_ENTRY_BYTES)
        for _ in range(entries):
            self.entry()
        for _ in range(tensors):
            self.tensor()

    def version(self) -> None:
        raw = self.take(4, "the version")
        # As the reader does: a version whose low half is 0 was written byte-swapped.
        if struct.unpack("<I", raw)[0] & 0xFFFF == 0:
            self.order = ">"
        version = struct.unpack(f"{self.order}I", raw)[0]
        if version not in (2, 3):
            raise UnreadableHeader(f"version {version:,} is not 2 or 3, the GGUF versions read")

    def count(self, what: str, cap: int, least: int) -> int:
        n = self.u64(f"the count of {what}")
        if n > cap:
            raise UnreadableHeader(f"declares {n:,} {what}; at most {cap:,}")
        if n * least > self.left:
            raise UnreadableHeader(
                f"declares {n:,} {what}, but its {self.size:,} bytes hold at most "
                f"{self.left // least:,} after the header"
            )
        return n

    def entry(self) -> None:
        at = self.pos
        key = shown(self.name("metadata key"))
        kind = self.u32(f"the value type of {key!r}")
        if kind == ARRAY:
            self.array(key, at)
        else:
            self.value(kind, key, at)

    def array(self, key: str, at: int) -> None:
        kind = self.u32(f"the element type of {key!r}")
        if kind == ARRAY:
            raise UnreadableHeader(f"metadata {key!r} at byte {at:,} is an array of arrays")
        known(kind, key, at)
        n = self.u64(f"the length of {key!r}")
        self.elements += n
        if self.elements > MAX_ELEMENTS:
            raise UnreadableHeader(
                f"array {key!r} at byte {at:,} declares {n:,} elements; metadata arrays "
                f"hold at most {MAX_ELEMENTS:,} all together"
            )
        if kind in SCALAR_BYTES:  # fixed size: one bounds check, one skip
            self.skip(n * SCALAR_BYTES[kind], f"array {key!r}")
            return
        self.bound(8 * n, f"array {key!r}")  # each string has a length
        for _ in range(n):
            self.value(kind, key, at)

    def value(self, kind: int, key: str, at: int) -> None:
        known(kind, key, at)
        if kind == STRING:
            self.skip(self.u64(f"a string length of {key!r}"), f"a string of {key!r}")
        else:
            self.skip(SCALAR_BYTES[kind], f"the value of {key!r}")

    def tensor(self) -> None:
        at = self.pos
        name = shown(self.name("tensor name"))
        dims = self.u32(f"the dimension count of tensor {name!r}")
        if dims > MAX_DIMS:
            raise UnreadableHeader(
                f"tensor {name!r} at byte {at:,} has {dims:,} dimensions; at most {MAX_DIMS}"
            )
        self.skip(8 * dims + 4 + 8, f"tensor {name!r}")  # shape, type, offset

    def name(self, what: str) -> str:
        at = self.pos
        n = self.u64(f"the length of a {what}")
        if n > MAX_KEY:
            raise UnreadableHeader(
                f"{what} at byte {at:,} is {n:,} bytes long; at most {MAX_KEY:,}"
            )
        raw = self.take(n, f"the {what}")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UnreadableHeader(f"{what} at byte {at:,} is not UTF-8") from None

    # ------------------------------------------------------------ bounded reads

    @property
    def left(self) -> int:
        return self.size - self.pos

    def u32(self, what: str) -> int:
        value: int = struct.unpack(f"{self.order}I", self.take(4, what))[0]
        return value

    def u64(self, what: str) -> int:
        value: int = struct.unpack(f"{self.order}Q", self.take(8, what))[0]
        return value

    def take(self, n: int, what: str) -> bytes:
        self.bound(n, what)
        data = self.f.read(n)
        if len(data) != n:  # the file shrank under us
            raise UnreadableHeader(f"the file ended inside {what} at byte {self.pos:,}")
        self.pos += n
        return data

    def skip(self, n: int, what: str) -> None:
        self.bound(n, what)
        self.pos += n
        self.f.seek(self.pos)

    def bound(self, n: int, what: str) -> None:
        if n > self.left:
            raise UnreadableHeader(
                f"{what} at byte {self.pos:,} runs past the end of the file "
                f"({n:,} bytes, {self.left:,} left)"
            )
