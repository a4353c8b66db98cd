"""kiln/headers.py and `doit new model=X.gguf` (issue 37): a GGUF whose header is forged
(counts of 2^40, a string past the end, a type GGUF lacks) or whose fields are of the
wrong kind (a file type of 9999, a context length that is a string) is refused as
`command line: model: X is not a GGUF kiln can read: REASON`, in bounded time and memory,
never a traceback; an honest GGUF still reads.

Honest files are written with gguf's own GGUFWriter; forged counts are patched into them
with struct, at offsets found in the file as gguf/gguf_reader.py lays it out."""

from __future__ import annotations

import os
import shutil
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, World, make_world, measured

from kiln.headers import MAX_ELEMENTS, UnreadableHeader, check_gguf

gguf = pytest.importorskip("gguf", reason="writing GGUF files needs the gguf package")
np = pytest.importorskip("numpy")

BIG = 1 << 40
# A whole refused `doit new` takes 0.3 s of CPU and 57 MiB here; unguarded, an array of
# arrays took 95 s and 15 GiB (killed), 2^20 + 1 one-byte elements 9.9 s and 777 MiB.
CHILD_CPU_S = 5.0
CHILD_RSS_MIB = 400


def honest(path: Path, **fields: object) -> Path:
    """A small llama GGUF as llama.cpp's convert script writes one; `fields` overrides
    (or adds) metadata, its value's type chosen by gguf from the Python type."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(2048)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b"])
    w.add_array("tokenizer.ggml.token_type", [1, 1, 1, 1])
    for key, value in fields.items():
        typed = {str: w.add_string, int: w.add_int32}[type(value)]
        typed(key, value)  # type: ignore[operator]
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def after_key(data: bytes, key: str) -> int:
    """The offset just past `key`'s bytes in the metadata: where its u32 value type is."""
    at = data.index(struct.pack("<Q", len(key)) + key.encode())
    return at + 8 + len(key)


def patch(path: Path, offset: int | Callable[[bytes], int], fmt: str, value: object) -> None:
    data = bytearray(path.read_bytes())
    where = offset(bytes(data)) if callable(offset) else offset
    struct.pack_into(fmt, data, where, value)
    path.write_bytes(bytes(data))


def arch(data: bytes) -> int:
    return after_key(data, "general.architecture")


def tokens(data: bytes) -> int:
    return after_key(data, "tokenizer.ggml.tokens")


def tensor(data: bytes) -> int:
    """The offset of the first tensor info's dimension count."""
    name = b"token_embd.weight"
    return data.index(struct.pack("<Q", len(name)) + name) + 8 + len(name)


def many_elements(path: Path) -> None:
    """2^20 + 1 one-byte elements that the file really holds: within its bytes, past
    the cap (gguf's reader spends ~9 us and ~0.7 KiB on each one)."""
    n = MAX_ELEMENTS + 1
    honest(path)
    data = bytearray(path.read_bytes())
    at = after_key(bytes(data), "tokenizer.ggml.token_type")
    struct.pack_into("<IIQ", data, at, 9, 0, n)  # array of uint8, n long
    path.write_bytes(bytes(data) + bytes(n))


# (case, how the file is made from an honest one, what the refusal says): the guard's
GUARDED: list[tuple[str, Callable[[Path], object], str]] = [
    ("metadata count 2^40", lambda p: patch(p, 16, "<Q", BIG),
     "declares 1,099,511,627,776 metadata entries; at most 65,536"),
    ("tensor count 2^40", lambda p: patch(p, 8, "<Q", BIG),
     "declares 1,099,511,627,776 tensors; at most 65,536"),
    ("metadata count past the file", lambda p: patch(p, 16, "<Q", 60_000),
     "declares 60,000 metadata entries, but its"),
    ("key length 2^40", lambda p: patch(p, 24, "<Q", BIG),
     "metadata key at byte 24 is 1,099,511,627,776 bytes long; at most 65,536"),
    ("string length past the end", lambda p: patch(p, lambda d: arch(d) + 4, "<Q", BIG),
     "a string of 'general.architecture' at byte 64 runs past the end of the file"),
    ("array length 2^40", lambda p: patch(p, lambda d: tokens(d) + 8, "<Q", BIG),
     "array 'tokenizer.ggml.tokens' at byte"),
    ("2^20 + 1 array elements the file holds", many_elements,
     "declares 1,048,577 elements; metadata arrays hold at most 1,048,576 all together"),
    ("value type 99", lambda p: patch(p, arch, "<I", 99),
     "metadata 'general.architecture' at byte 24 has value type 99, which GGUF does not"),
    ("array of arrays", lambda p: patch(p, lambda d: tokens(d) + 4, "<I", 9),
     "metadata 'tokenizer.ggml.tokens' at byte"),
    ("version 7", lambda p: patch(p, 4, "<I", 7), "version 7 is not 2 or 3"),
    ("not GGUF", lambda p: p.write_bytes(b"GGML" + bytes(60)), "it starts with b'GGML'"),
    ("cut inside an array", lambda p: p.write_bytes(p.read_bytes()[: tokens(p.read_bytes()) + 30]),
     "array 'tokenizer.ggml.tokens' at byte 276 runs past the end of the file"),
    ("tensor with 2^31 dimensions", lambda p: patch(p, tensor, "<I", 1 << 31),
     "tensor 'token_embd.weight' at byte"),
]  # fmt: skip
# past the guard: gguf's reader's own failures, and fields of the wrong kind
PAST_GUARD: list[tuple[str, Callable[[Path], object], str]] = [
    ("tensor of ggml type 999", lambda p: patch(p, lambda d: tensor(d) + 4 + 16, "<I", 999),
     "999) is not a valid GGMLQuantizationType"),
    ("architecture not UTF-8", lambda p: patch(p, lambda d: arch(d) + 12, "<B", 0xFF),
     "UnicodeDecodeError"),
    ("file type 9999", lambda p: honest(p, **{"general.file_type": 9999}),
     "general.file_type 9999 is no llama.cpp file type"),
    ("context length a string", lambda p: honest(p, **{"llama.context_length": "lots"}),
     "llama.context_length is 'lots', not a positive int"),
    ("context length negative", lambda p: honest(p, **{"llama.context_length": -5}),
     "llama.context_length is -5, not a positive int"),
    ("architecture a number", lambda p: honest(p, **{"general.architecture": 7}),
     "general.architecture is 7, not a str"),
]  # fmt: skip
FORGED = GUARDED + PAST_GUARD


def _world(tmp_path: Path) -> World:
    world = make_world(tmp_path, tmp_path / "hub", ())
    (world.root / "catalog").mkdir()
    shutil.copy(ROOT / "catalog" / "architectures.yaml", world.root / "catalog")
    (world.root / "models").mkdir()
    return world


def doit_new(world: World, model: str) -> tuple[int, str, float, float]:
    """`doit new name=x model=MODEL` as a user runs it: (exit code, stdout + stderr, CPU
    seconds, peak RSS in MiB) of that one child (conftest.measured)."""
    got = measured(world.argv("new", "name=x", f"model={model}"), world.env)
    return got.code, got.out, got.cpu_s, got.peak_mb


@pytest.mark.parametrize(("case", "make", "says"), FORGED, ids=[c[0] for c in FORGED])
def test_a_forged_gguf_is_refused_located_fast_and_small(
    tmp_path: Path, case: str, make: Callable[[Path], object], says: str
) -> None:
    world = _world(tmp_path)
    path = honest(world.root / "models" / "forged.gguf")
    make(path)
    code, text, cpu, rss = doit_new(world, "models/forged.gguf")
    assert code == 1, text
    assert "command line: model: models/forged.gguf is not a GGUF kiln can read: " in text, text
    assert says in text, text
    assert "Traceback" not in text, text
    assert cpu < CHILD_CPU_S and rss < CHILD_RSS_MIB, (case, cpu, rss)
    assert not (world.root / "recipes" / "x.yaml").exists()


def test_the_guard_alone_refuses_in_a_millisecond_and_a_few_kib(tmp_path: Path) -> None:
    """In-process: the guard reads nothing by a declared size (tracemalloc sees only the
    bytes it reads) and stops at the first count it cannot believe."""
    for case, make, says in GUARDED:
        path = honest(tmp_path / f"{case}.gguf")
        make(path)
        tracemalloc.start()
        start = time.process_time()
        with pytest.raises(UnreadableHeader) as caught:
            check_gguf(path)
        cpu = time.process_time() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert says in str(caught.value), case
        assert cpu < 0.1 and peak < 256 * 1024, (case, cpu, peak)


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableHeader, match="it is not a regular file"):
        check_gguf(fifo)


def test_an_honest_gguf_still_reads(tmp_path: Path) -> None:
    world = _world(tmp_path)
    honest(world.root / "models" / "ok.gguf")
    check_gguf(world.root / "models" / "ok.gguf")
    code, text, _, _ = doit_new(world, "models/ok.gguf")
    assert code == 0, text
    recipe = yaml.safe_load((world.root / "recipes" / "x.yaml").read_text())
    assert recipe["model"]["architecture"] == "LlamaForCausalLM"
    assert recipe["build"]["max_seq_len"] == 2048  # llama.context_length
    assert recipe["validation"]["chat"] is True  # tokenizer.chat_template
    assert "Q4_1 GGUF" in recipe["description"]  # general.file_type, as llama.cpp names it


def test_a_byte_swapped_gguf_passes_the_guard_as_the_reader_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "big-endian.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=gguf.GGUFEndian.BIG)
    w.add_context_length(2048)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a"])
    w.add_tensor("token_embd.weight", np.zeros((2, 4), dtype=np.float32).byteswap())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    check_gguf(path)
    assert gguf.GGUFReader(str(path)).fields["llama.context_length"].contents() == 2048
