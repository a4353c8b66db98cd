"""Where a graph's weights live on disk: in the checkpoint's own bytes where they can.

An fp32 export's weights are the checkpoint's tensors, but not as stored: the
TorchScript exporter writes each Linear's weight transposed (MatMul reads [K, N]; a
checkpoint stores [N, K]), and a tied output projection as a second, transposed copy
of the embedding. Stored that way, a 135 M model's export held 652 MB of new bytes
beside its 542 MB checkpoint, although no value differs. So:

stored_layout  (export) each MatMul whose weight is the transpose of a checkpoint
               matrix reads it as Transpose(the matrix as stored) instead
fuse_transposed (onnx step, last) MatMul(A, Transpose(W)) becomes onnxruntime's
               FusedMatMul(A, W, transB=1): the same product, over W as stored
               (MLAS packs a constant B either way, so a forward costs the same)
share_data     a saved graph's external tensors that are byte ranges of a source
               file (a checkpoint's safetensors, the previous step's data files) are
               read from a copy of that file placed beside it, which kiln's store
               keeps once (kiln/store's blobs); the rest stay in `<graph>.data`

A checkpoint file is a safetensors file: an 8-byte little-endian header length, the
JSON header (each tensor's dtype, shape and data_offsets), then the tensors' bytes
(https://huggingface.co/docs/safetensors, "Format"). Matching is by bytes, verified
in full, so what a graph reads is unchanged.

Alignment. onnxruntime reads an external tensor where it lies in the file, so a
weight that starts off a cache line is read with loads that straddle lines at every
step. safetensors pads its header to 8 bytes only: the SmolLM2 import's tensors began
at 40 mod 64, and its fp32 decode step took 34.4 ms against 28.7 ms with the same
bytes 4096-aligned (the same graph, one thread, sessions interleaved in one process;
one bundle per process the gain was smaller, README "Aligned weights"). So a tensor is shared
only where it starts on an ALIGN boundary of its source file, the tensors a graph
keeps in its own data file start on one, and `align_header` pads a safetensors
header with the spaces the format allows, so that a checkpoint kiln writes (the
GGUF import) starts its data on a page.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# a source file is copied beside a graph only when the graph reads at least this share
# of it (otherwise the graph would carry the rest unread)
SHARE_MIN = 0.9
KEY = 64  # bytes of a tensor's start that index it (external tensors are >= 1 KiB)
ALIGN = 64  # a shared or kept external tensor starts on a cache line
PAGE = 4096  # where align_header starts a safetensors file's data


def safetensors_tensors(path: Path) -> Iterator[tuple[str, str, list[int], int, int]]:
    """(name, dtype, shape, offset in the file, bytes) of each tensor of a safetensors
    file, in file order."""
    with path.open("rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(size))
    base = 8 + size
    rows = [
        (
            name,
            v["dtype"],
            v["shape"],
            base + v["data_offsets"][0],
            v["data_offsets"][1] - v["data_offsets"][0],
        )
        for name, v in header.items()
        if name != "__metadata__"
    ]
    yield from sorted(rows, key=lambda r: r[3])


def align_header(path: Path, boundary: int = PAGE) -> int:
    """Rewrite the safetensors file `path` with its JSON header padded by trailing spaces
    (which the format allows) so that its data starts at a multiple of `boundary`;
    the tensors and their offsets are unchanged. Returns the padding added."""
    with path.open("rb") as fh:
        size = int.from_bytes(fh.read(8), "little")
        header = fh.read(size)
        pad = -(8 + size) % boundary
        if not pad:
            return 0
        staged = path.with_name(path.name + ".aligning")
        with staged.open("wb") as out:
            out.write((size + pad).to_bytes(8, "little"))
            out.write(header + b" " * pad)
            shutil.copyfileobj(fh, out, 16 << 20)
    staged.replace(path)
    return pad


def checkpoint_starts(folder: Path) -> dict[Path, list[int]]:
    """Each safetensors file of a checkpoint folder, with where its tensors begin."""
    return {
        path: [offset for *_, offset, n in safetensors_tensors(path) if n]
        for path in sorted(folder.glob("*.safetensors"))
    }


def graph_starts(path: Path) -> dict[Path, list[int]]:
    """Each external-data file of a saved graph, with where its tensors begin."""
    found: dict[Path, list[int]] = {}
    for _, info in external_tensors(_load(path)):
        found.setdefault(path.parent / info["location"], []).append(int(info.get("offset", 0)))
    return found


def stored_layout(ir_model: Any, folder: Path) -> dict[str, tuple[str, int, int]]:
    """In place on an onnx_ir model: each MatMul whose weight (an fp32 matrix
    initializer used only there) is the transpose of a matrix of the checkpoint's
    safetensors files reads Transpose(that matrix as stored) instead. Returns the
    stored initializers' names with (file name, offset, bytes) of their checkpoint
    bytes, which fuse_siblings uses to fuse only siblings adjacent in the file."""
    import numpy as np
    import onnx_ir as ir

    index: dict[bytes, tuple[str, int, int]] = {}
    for path in sorted(folder.glob("*.safetensors")):
        data = np.memmap(path, np.uint8, mode="r")
        for _, dtype, shape, offset, n in safetensors_tensors(path):
            if dtype == "F32" and len(shape) == 2 and n:
                index[_digest(data[offset : offset + n])] = (path.name, offset, n)
    graph = ir_model.graph
    where: dict[str, tuple[str, int, int]] = {}
    for node in list(graph):
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            continue
        w = node.inputs[1]
        if w is None or not w.is_initializer() or len(w.uses()) != 1:
            continue
        t = w.const_value
        if t is None or t.dtype != ir.DataType.FLOAT or len(t.shape) != 2:
            continue
        stored = np.ascontiguousarray(t.numpy().T)
        hit = index.get(_digest(stored))
        if hit is None:
            continue
        name = f"{w.name}.stored"
        value = ir.Value(name=name, const_value=ir.tensor(stored))
        graph.register_initializer(value)
        transpose = ir.Node(
            "",
            "Transpose",
            [value],
            [ir.AttrInt64s("perm", [1, 0])],
            name=f"{w.name}.transpose",
            num_outputs=1,
        )
        graph.insert_before(node, [transpose])
        node.replace_input_with(1, transpose.outputs[0])
        del graph.initializers[w.name]
        where[name] = hit
    return where


def transposed_weight(node: Any) -> Any:
    """W where `node` is MatMul(A, Transpose(W)) over a matrix initializer W that only
    that Transpose reads, whose output only `node` reads; else None."""
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
        return None
    b = node.inputs[1]
    producer = b.producer() if b is not None else None
    if producer is None or producer.op_type != "Transpose" or len(b.uses()) != 1:
        return None
    perm = producer.attributes.get("perm")
    w = producer.inputs[0]
    if perm is None or list(perm.as_ints()) != [1, 0] or w is None or not w.is_initializer():
        return None
    t = w.const_value
    return w if t is not None and len(t.shape) == 2 and len(w.uses()) == 1 else None


def keep_transpose(node: Any) -> bool | None:
    """For onnxscript's constant folding (graph.tidy's `should_fold`): False for the
    Transpose of MatMul(A, Transpose(W)) over a matrix initializer W, which folding
    would turn back into a transposed copy of W (fuse_transposed reads W as stored);
    None, the default rules, for every other node."""
    if node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return None
    uses = node.outputs[0].uses()
    if len(uses) == 1 and uses[0].idx == 1 and transposed_weight(uses[0].node) is not None:
        return False
    return None


def fuse_transposed(model: Any) -> tuple[Any, int]:
    """MatMul(A, Transpose(W)) over a matrix initializer W becomes onnxruntime's
    FusedMatMul(A, W, transB=1) (com.microsoft): the same product, over W as the
    checkpoint stores it. Returns the model and how many were rewritten."""
    import onnx_ir as ir

    ir_model = ir.serde.deserialize_model(model)
    graph = ir_model.graph
    done = 0
    for node in list(graph):
        w = transposed_weight(node)
        if w is None:
            continue
        b = node.inputs[1]
        transpose = b.producer() if b is not None else None
        assert transpose is not None  # transposed_weight found it
        fused = ir.Node(
            "com.microsoft",
            "FusedMatMul",
            [node.inputs[0], w],
            [ir.AttrFloat32("alpha", 1.0), ir.AttrInt64("transA", 0), ir.AttrInt64("transB", 1)],
            name=node.name,
            num_outputs=1,
        )
        graph.insert_before(node, [fused])
        out = node.outputs[0]
        name, out.name = out.name, None
        fused.outputs[0].name = name
        fused.outputs[0].type, fused.outputs[0].shape = out.type, out.shape
        out.replace_all_uses_with(fused.outputs[0], replace_graph_outputs=True)
        graph.remove([node, transpose], safe=True)
        done += 1
    if done:
        ir_model.opset_imports.setdefault("com.microsoft", 1)
    return ir.serde.serialize_model(ir_model), done


def share_data(saved: Path, sources: dict[Path, list[int]]) -> tuple[int, int]:
    """Point the external tensors of the saved graph `saved` (all in `<saved>.data`)
    that are byte ranges of a source file starting at one of its listed offsets at a
    copy of that file beside the graph (named as the source, or `source.<name>` where
    that name is taken), when the graph reads at least SHARE_MIN of it; `<saved>.data`
    keeps only the others (it goes when there are none). Returns (bytes shared, bytes
    kept new)."""
    import onnx

    model = _load(saved)
    own = saved.parent / f"{saved.name}.data"
    maps = {path: _map(path) for path in sources}
    index: dict[bytes, list[tuple[Path, int]]] = {}
    for path, starts in sources.items():
        for start in starts:
            if start % ALIGN:  # read off a cache line at every step (the docstring)
                continue
            index.setdefault(bytes(maps[path][start : start + KEY]), []).append((path, start))
    hits: list[tuple[Any, bytes, tuple[Path, int] | None]] = []
    ranges: dict[Path, set[tuple[int, int]]] = {}
    with own.open("rb") as fh:
        for tensor, info in external_tensors(model):
            if info["location"] != own.name:
                raise ValueError(f"{saved}: external data {info['location']!r}, not {own.name!r}")
            fh.seek(int(info.get("offset", 0)))
            data = fh.read(int(info["length"]))
            hit = next(
                (
                    (path, start)
                    for path, start in index.get(data[:KEY], [])
                    if maps[path][start : start + len(data)] == data
                ),
                None,
            )
            hits.append((tensor, data, hit))
            if hit is not None:
                ranges.setdefault(hit[0], set()).add((hit[1], len(data)))
    used = {p for p, spans in ranges.items() if _covered(spans) >= SHARE_MIN * p.stat().st_size}
    for m in maps.values():
        m.close()
    if not used and all(int(_info(t).get("offset", 0)) % ALIGN == 0 for t, _, _ in hits):
        return 0, sum(len(data) for _, data, _ in hits)
    taken = {saved.name, own.name}
    names = {}
    for path in sorted(used):
        names[path] = path.name if path.name not in taken else f"source.{path.name}"
        taken.add(names[path])
        shutil.copyfile(path, saved.parent / names[path])
    shared = kept = 0
    fresh: list[tuple[Any, bytes]] = []
    for tensor, data, hit in hits:
        if hit is None or hit[0] not in used:
            fresh.append((tensor, data))
            kept += len(data)
        else:
            _point(tensor, names[hit[0]], hit[1], len(data))
            shared += len(data)
    own.unlink()
    if fresh:
        with own.open("wb") as fh:
            for tensor, data in fresh:
                fh.write(b"\0" * (-fh.tell() % ALIGN))
                _point(tensor, own.name, fh.tell(), len(data))
                fh.write(data)
    onnx.save(model, str(saved))
    return shared, kept


def _digest(data: Any) -> bytes:
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).digest()


def _map(path: Path) -> mmap.mmap:
    with path.open("rb") as fh:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)


def _covered(spans: set[tuple[int, int]]) -> int:
    """The bytes a set of (offset, length) ranges covers, overlaps counted once."""
    total, end = 0, 0
    for start, n in sorted(spans):
        total += max(0, start + n - max(start, end))
        end = max(end, start + n)
    return total


def _load(path: Path) -> Any:
    import onnx

    return onnx.load(str(path), load_external_data=False)


def _info(tensor: Any) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def external_tensors(model: Any) -> list[tuple[Any, dict[str, str]]]:
    """Each initializer that lives in external data, with its location, offset and length."""
    import onnx

    return [
        (t, {e.key: e.value for e in t.external_data})
        for t in model.graph.initializer
        if t.data_location == onnx.TensorProto.EXTERNAL
    ]


def _point(tensor: Any, location: str, offset: int, length: int) -> None:
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
