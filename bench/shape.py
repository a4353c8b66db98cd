"""A catalog to build a real model's geometry in, with seeded weights: the SmolLM2-135M
one of issue 18's benchmark, or Qwen3-8B's for issue 39's 8B-class run.

    python bench/shape.py DIR [--shape smollm2|qwen3-8b] [--target sm90] [--layers N]
        [--max-seq-len 1024] [--prefill-chunk-len 128] [--max-batch-size B]
        [--computes bf16,fp8] [--workers N]

writes DIR/catalog/: the repository's prompts/ and thresholds/, an empty manifests/, a
checkpoint of the shape's geometry with seeded weights in checkpoints/<shape>-shape/,
and recipes that build it on the inductor backend for --target, pinned by the folder's
digest, one per compute (--computes, default the shape's):

    smollm2   (30 layers, hidden 576, 9 heads, 3 KV heads, head_dim 64, intermediate
              1536, vocabulary 49,152, tied embeddings; fp32 weights, 540 MB)
              smollm2-shape-inductor-<host>         fp32, judged fp32-exact
              smollm2-shape-inductor-bf16-<host>    bf16, judged by the half-precision gates
              (<host>: h200 for --target sm90, as the catalog named it, else the target)
    qwen3-8b  (Qwen3ForCausalLM: 36 layers, hidden 4096, 32 heads, 8 KV heads, head_dim
              128, intermediate 12288, vocabulary 151,936, untied, q/k norms, rope_theta
              1e6; 8.19 B parameters, stored bf16 as Qwen/Qwen3-8B ships them: 16.4 GB)
              qwen3-8b-shape-inductor-bf16-<target>   bf16, half-precision gates
              qwen3-8b-shape-inductor-fp8-<target>    fp8 weights (modelopt calibration,
                                                      torch._scaled_mm), quantized-fp8 gates
              (and -fp32-<target>, fp32-exact, when asked: what a CPU without the GPU
              checks at a reduced --layers)
              qwen3-8b-shape-inductor-bf16-dspark-<target>
                                    when asked (--computes ...,bf16-dspark; issue 39's
                                    headline): bf16, batch 1, speculating with a seeded
                                    DSpark drafter of DeepSpec's Qwen3-8B geometry in
                                    checkpoints/qwen3-8b-shape-dspark (5 layers of the
                                    target's width, block 7, target_layer_ids [1, 9, 17,
                                    25, 33], a rank-256 Markov head, a confidence head, and
                                    the target's embedding and head copied; at fewer than 8
                                    --layers, 1 layer reading [layers // 2]: 2.4 B values,
                                    4.8 GB bf16, at 36): the half-precision gates and
                                    lossless speculation (thresholds/half-precision-
                                    speculative.yaml); its acceptance is
                                    recorded, not gated: a seeded drafter accepts little

Then `KILN_ROOT=DIR/catalog KILN_STORE=DIR/store doit -f dodo.py build recipe=NAME`
builds and validates one, and `bench/decode_gpu.py --checkpoint
DIR/catalog/checkpoints/<shape>-shape --recipe NAME` (same KILN_ROOT, KILN_STORE) times it.

The weights are tinyhub's seeded values (tinyhub.tensor_slice: bit-identical on every
machine), rounded to the checkpoint's dtype (bf16 for qwen3-8b: round to nearest even,
exact in the fp32 the builders load), written straight into the safetensors file by
--workers processes, each a slice of a tensor at its offset: no process holds more than
a slice. Rate (this 2-core host, shared): about 20 ns a value a process, so the 8.19 B
values take some 160 s of one core, about 12 s on the GPU machine's 16 (plus the
write and the hash of 16.4 GB). The file is written read-only: the fetch step links a
read-only local file into the store instead of copying it (builders/fetch.py). The
tokenizer is tinyhub's (512 tokens: the prompts' ids fall in it, the model's vocabulary
is the real one). The catalog stays out of the repository's own.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Shape:
    name: str  # the checkpoint folder and the recipes' prefix
    config: dict[str, Any]  # config.json as published, less the tokenizer's ids
    dtype: str  # the checkpoint's: F32 or BF16 (safetensors' names)
    computes: tuple[str, ...]  # the recipes written by default
    max_batch_size: int
    summary: str  # the recipes' description of the geometry


# SmolLM2-135M's config.json, as published (HuggingFaceTB/SmolLM2-135M).
SMOLLM2: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_act": "silu",
    "vocab_size": 49152,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 100000,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "float32",
}
# Qwen/Qwen3-8B's config.json (revision b968826d9c46dd6066d109eabc6255188de91218,
# shared/reference/hf_revisions.tsv), as published; its 151,643/151,645 special ids
# are the tiny tokenizer's here.
QWEN3_8B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-6,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
SHAPES = {
    "smollm2": Shape(
        "smollm2-shape",
        SMOLLM2,
        "F32",
        ("fp32", "bf16"),
        1,
        "SmolLM2-135M's geometry ({layers} layers, hidden 576, 9 heads, 3 KV heads, "
        "vocabulary 49,152)",
    ),
    "qwen3-8b": Shape(
        "qwen3-8b-shape",
        QWEN3_8B,
        "BF16",
        ("bf16", "fp8"),
        8,
        "Qwen3-8B's geometry ({layers} layers, hidden 4096, 32 heads, 8 KV heads, "
        "intermediate 12288, vocabulary 151,936), stored bf16",
    ),
}
# Values a worker makes per task: 64 MB of bf16, 128 MB of fp32.
SLICE = 32 << 20


def model_config(shape: Shape, layers: int) -> dict[str, Any]:
    import tinyhub

    return {
        **shape.config,
        "num_hidden_layers": layers,
        "bos_token_id": tinyhub.BOS,
        "eos_token_id": tinyhub.EOS,
        "pad_token_id": tinyhub.PAD,
    }


def header(shapes: dict[str, tuple[int, ...]], dtype: str) -> bytes:
    """The safetensors header of `shapes` in `dtype`, laid out as safetensors.save lays
    out one dtype: names sorted, data back to back, compact JSON padded with spaces to
    8 bytes, after its 8-byte little-endian length (bytes equal to save's)."""
    width = {"F32": 4, "BF16": 2}[dtype]
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    at = 0
    for name, dims in sorted(shapes.items()):
        size = width
        for d in dims:
            size *= d
        entries[name] = {"dtype": dtype, "shape": list(dims), "data_offsets": [at, at + size]}
        at += size
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def _fill(task: tuple[str, str, str, tuple[int, ...], str, int, int, int]) -> None:
    """One slice of one tensor, generated and written at its place in the file."""
    import numpy as np

    import tinyhub

    path, seed, name, dims, dtype, start, count, offset = task
    values = tinyhub.tensor_slice(seed, name, dims, start, count)
    if dtype == "BF16":  # round to nearest even, as torch's and ml_dtypes' casts do
        import ml_dtypes

        values = values.astype(ml_dtypes.bfloat16)
    fd = os.open(path, os.O_WRONLY)
    try:
        data = memoryview(np.ascontiguousarray(values).view(np.uint8).data)
        while data:
            done = os.pwrite(fd, data, offset)
            data, offset = data[done:], offset + done
    finally:
        os.close(fd)


def write_weights(path: Path, shape: Shape, config: dict[str, Any], workers: int) -> None:
    """The seeded weights of `config` as one safetensors file at `path`, written by
    `workers` processes (0: in this one)."""
    import tinyhub

    shapes = tinyhub.parameter_shapes(config)
    if config.get("tie_word_embeddings"):
        shapes.pop("lm_head.weight", None)  # tied: the embedding is the head
    write_tensors(path, shapes, shape.dtype, f"kiln-bench/{shape.name}", {}, workers)


def write_tensors(
    path: Path,
    shapes: dict[str, tuple[int, ...]],
    dtype: str,
    seed: str,
    sources: dict[str, tuple[str, str]],
    workers: int,
) -> None:
    """Seeded tensors `shapes` as one safetensors file at `path`: each the values of its
    own name under `seed`, or of `sources`' (seed, name) where it names one (a copy of
    another checkpoint's tensor)."""
    head = header(shapes, dtype)
    width = {"F32": 4, "BF16": 2}[dtype]
    meta = json.loads(head[8:])
    tasks = []
    for name, dims in sorted(shapes.items()):
        first = len(head) + meta[name]["data_offsets"][0]
        count = meta[name]["data_offsets"][1] // width - meta[name]["data_offsets"][0] // width
        origin, values = sources.get(name, (seed, name))
        for start in range(0, count, SLICE):
            n = min(SLICE, count - start)
            tasks.append((str(path), origin, values, dims, dtype, start, n, first + start * width))
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + max(e["data_offsets"][1] for e in meta.values() if "dtype" in e))
    if workers:
        with ProcessPoolExecutor(workers) as pool:
            list(pool.map(_fill, tasks))
    else:
        for task in tasks:
            _fill(task)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(16 << 20):
            h.update(block)
    return h.hexdigest()


def write_checkpoint(folder: Path, shape: Shape, layers: int, workers: int) -> str:
    """The checkpoint's files in `folder`, read-only; its digest (kiln.pins.tree_digest)."""
    import tinyhub

    config = model_config(shape, layers)
    texts = tinyhub.text_files(config)
    return _sealed(folder, texts, lambda path: write_weights(path, shape, config, workers))


def _sealed(folder: Path, texts: dict[str, bytes], weights: Any) -> str:
    """`folder` made afresh with `texts` and the model.safetensors `weights(path)`
    writes, read-only (the fetch step links a read-only file: builders/fetch.py); its
    digest (kiln.pins.tree_digest)."""
    from kiln.pins import tree_digest

    if folder.exists():
        for p in folder.iterdir():
            p.chmod(stat.S_IWUSR | stat.S_IRUSR)
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    listing = []
    for name, data in texts.items():
        (folder / name).write_bytes(data)
        listing.append((name, hashlib.sha256(data).hexdigest()))
    path = folder / "model.safetensors"
    weights(path)
    listing.append((path.name, sha256_of(path)))
    for p in folder.iterdir():
        p.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    return tree_digest(listing)


# DeepSpec's DSpark drafter for Qwen3-8B (config/dspark/dspark_qwen3_8b.py;
# shared/reference/spec_decoding_facts.md section 3): 5 layers, block 7, mask id 151669,
# a rank-256 vanilla Markov head, a confidence head reading it.
DSPARK_LAYERS = 5
DSPARK_BLOCK = 7
DSPARK_MASK = 151669


def dspark_config(shape: Shape, layers: int) -> dict[str, Any]:
    """The drafter's config.json for a target of `layers` layers: DeepSpec's at 36 (ids
    [1, 9, 17, 25, 33], DFlash's default rule, builders/causal_lm/_capture.py), one layer
    reading [layers // 2] where the rule needs more layers than a cut target has."""
    drafts = DSPARK_LAYERS if layers >= 8 else 1
    if drafts == 1:
        ids = [layers // 2]
    else:
        step = (layers - 4) / (drafts - 1)
        ids = [round(1 + i * step) for i in range(drafts)]
    target = shape.config
    keep = [
        "hidden_size",
        "intermediate_size",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "rms_norm_eps",
        "rope_theta",
        "vocab_size",
        "max_position_embeddings",
        "hidden_act",
    ]
    return {
        **{k: target[k] for k in keep},
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "num_hidden_layers": drafts,
        "block_size": DSPARK_BLOCK,
        "num_target_layers": layers,
        "mask_token_id": DSPARK_MASK,
        "target_layer_ids": ids,
        "markov_rank": 256,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        "tie_word_embeddings": False,
        "torch_dtype": target["torch_dtype"],
    }


def dspark_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The DSpark checkpoint's tensors (spec_decoding_facts.md section 3's weight names,
    as tinyhub/drafters.py writes the tiny one)."""
    h, v, r = config["hidden_size"], config["vocab_size"], config["markov_rank"]
    q, kv = (
        config["num_attention_heads"] * config["head_dim"],
        (config["num_key_value_heads"] * config["head_dim"]),
    )
    ffn, dim = config["intermediate_size"], config["head_dim"]
    shapes: dict[str, tuple[int, ...]] = {
        "fc.weight": (h, len(config["target_layer_ids"]) * h),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
        "embed_tokens.weight": (v, h),
        "lm_head.weight": (v, h),
        "markov_head.markov_w1.weight": (v, r),
        "markov_head.markov_w2.weight": (v, r),
        "confidence_head.proj.weight": (1, h + r),
        "confidence_head.proj.bias": (1,),
    }
    for i in range(config["num_hidden_layers"]):
        at = f"layers.{i}"
        shapes |= {
            f"{at}.input_layernorm.weight": (h,),
            f"{at}.post_attention_layernorm.weight": (h,),
            f"{at}.self_attn.q_proj.weight": (q, h),
            f"{at}.self_attn.k_proj.weight": (kv, h),
            f"{at}.self_attn.v_proj.weight": (kv, h),
            f"{at}.self_attn.o_proj.weight": (h, q),
            f"{at}.self_attn.q_norm.weight": (dim,),
            f"{at}.self_attn.k_norm.weight": (dim,),
            f"{at}.mlp.gate_proj.weight": (ffn, h),
            f"{at}.mlp.up_proj.weight": (ffn, h),
            f"{at}.mlp.down_proj.weight": (h, ffn),
        }
    return shapes


def write_dspark(folder: Path, shape: Shape, layers: int, workers: int) -> str:
    """The seeded DSpark drafter of the target's geometry in `folder`, its embed_tokens
    and lm_head the target's own values (DSpark ships frozen copies); its digest."""
    config = dspark_config(shape, layers)
    seed = f"kiln-bench/{shape.name}"
    sources = {
        "embed_tokens.weight": (seed, "model.embed_tokens.weight"),
        "lm_head.weight": (seed, "lm_head.weight"),
    }
    texts = {"config.json": json.dumps(config, indent=2, sort_keys=True).encode() + b"\n"}
    shapes = dspark_shapes(config)
    return _sealed(
        folder,
        texts,
        lambda path: write_tensors(path, shapes, shape.dtype, seed + "-dspark", sources, workers),
    )


THRESHOLDS = {
    "fp32": "fp32-exact",
    "bf16": "half-precision",
    "fp8": "quantized-fp8",
    "bf16-dspark": "half-precision-speculative",
}


def recipe_name(shape: Shape, compute: str, target: str) -> str:
    if shape.name == "smollm2-shape":  # the catalog's first names, kept
        host = "h200" if target == "sm90" else target
        return f"{shape.name}-inductor{'' if compute == 'fp32' else '-' + compute}-{host}"
    return f"{shape.name}-inductor-{compute}-{target}"


def recipe(
    shape: Shape, compute: str, digest: str, args: argparse.Namespace, drafter: str = ""
) -> str:
    """`drafter`: the DSpark companion's digest, for bf16-dspark."""
    precision = {
        "fp32": "  weights: fp32\n",
        "bf16": "  weights: fp32\n  compute: bf16\n",
        "bf16-dspark": "  weights: fp32\n  compute: bf16\n",
        "fp8": "  weights: fp8\n  kv_cache: auto\n  compute: bf16\n",
    }[compute]
    execution = "  variant: ordinary\n"
    batch = args.max_batch_size
    companions = ""
    architecture = ""
    if compute == "bf16-dspark":  # speculation decodes one prompt at a time: batch 1
        execution = f"  variant: dspark\n  block_length: {DSPARK_BLOCK}\n"
        batch = 1
        companions = (
            f"companions:\n  draft:\n    path: checkpoints/{shape.name}-dspark\n"
            f"    sha256: {drafter}\n"
        )
        # a drafter is defined for the families it names (catalog/rules.yaml)
        architecture = f"  architecture: {shape.config['architectures'][0]}\n"
    calibration = "calibration:\n  samples: 8\n  max_tokens: 64\n" if compute == "fp8" else ""
    scored = "  scored_positions: 512\n" if compute != "fp32" else ""
    geometry = shape.summary.format(layers=args.layers)
    return f"""\
schema_version: 1
description: >-
  Seeded weights of {geometry}, {compute} on the inductor backend for {args.target}
  (bench/shape.py).
task: text-generation
model:
  path: checkpoints/{shape.name}
  sha256: {digest}
{architecture}{companions}precision:
{precision}execution:
{execution}build:
  backend: inductor
  target: {args.target}
  max_batch_size: {batch}
  max_seq_len: {args.max_seq_len}
  prefill_chunk_len: {args.prefill_chunk_len}
{calibration}validation:
  thresholds: {THRESHOLDS[compute]}
  prompts: default
  max_new_tokens: 16
{scored}"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    parser.add_argument("--target", default="sm90")
    parser.add_argument("--layers", type=int, help="default: the model's")
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--prefill-chunk-len", type=int, default=128)
    parser.add_argument("--max-batch-size", type=int, help="default: the shape's")
    parser.add_argument(
        "--computes",
        help="fp32,bf16,fp8,bf16-dspark: which recipes (default: the shape's; bf16-dspark, "
        "qwen3-8b's, also writes its drafter)",
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    shape = SHAPES[args.shape]
    args.layers = args.layers or shape.config["num_hidden_layers"]
    args.max_batch_size = args.max_batch_size or shape.max_batch_size
    computes = args.computes.split(",") if args.computes else shape.computes

    catalog = args.dir / "catalog"
    for folder in ("thresholds", "prompts"):
        shutil.rmtree(catalog / folder, ignore_errors=True)
        shutil.copytree(ROOT / folder, catalog / folder)
    (catalog / "manifests").mkdir(parents=True, exist_ok=True)
    (catalog / "recipes").mkdir(exist_ok=True)
    folder = catalog / "checkpoints" / shape.name
    digest = write_checkpoint(folder, shape, args.layers, args.workers)
    drafter = ""
    if "bf16-dspark" in computes:
        if shape.config["model_type"] != "qwen3":
            parser.error("bf16-dspark: the DSpark drafter is written for --shape qwen3-8b")
        drafts = catalog / "checkpoints" / f"{shape.name}-dspark"
        drafter = write_dspark(drafts, shape, args.layers, args.workers)
        size = sum(p.stat().st_size for p in drafts.iterdir()) / 1e6
        print(f"{drafts}: {size:.0f} MB, sha256 {drafter}")
    for compute in computes:
        name = recipe_name(shape, compute, args.target)
        text = recipe(shape, compute, digest, args, drafter)
        (catalog / "recipes" / f"{name}.yaml").write_text(text)
        print(name)
    size = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
    print(f"{folder}: {size:.0f} MB, sha256 {digest}")


if __name__ == "__main__":
    main()
