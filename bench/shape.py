"""A catalog to build the SmolLM2-135M-geometry bundles of issue 18's benchmark in.

    python bench/smollm2_shape.py DIR [--target sm90] [--layers 30] [--max-seq-len 1024]
        [--prefill-chunk-len 128]

writes DIR/catalog/: the repository's prompts/ and thresholds/, an empty manifests/, a
checkpoint of SmolLM2-135M's geometry (30 layers, hidden 576, 9 heads, 3 KV heads,
head_dim 64, intermediate 1536, vocabulary 49,152, tied embeddings; the real model's
config otherwise) with seeded weights in checkpoints/smollm2-shape/, and two recipes
that build it on the inductor backend for --target, pinned by the folder's digest:

    smollm2-shape-inductor-<host>         fp32, judged fp32-exact
    smollm2-shape-inductor-bf16-<host>    bf16, judged by the half-precision gates

(<host>: h200 for --target sm90, else the target).

Then `KILN_ROOT=DIR/catalog KILN_STORE=DIR/store doit -f dodo.py build recipe=NAME`
builds and validates one, and `bench/decode_gpu.py --checkpoint
DIR/catalog/checkpoints/smollm2-shape --recipe NAME` (same KILN_ROOT, KILN_STORE) times it.

The weights come from tinyhub's seeded generator (bit-identical on every machine); the
tokenizer is tinyhub's (512 tokens: the prompts' ids fall in it, the model's vocabulary
is the real 49,152). The catalog stays out of the repository's own: its checkpoint is
540 MB, generated in about ten seconds where it is used.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NAME = "smollm2-shape"
# SmolLM2-135M's config.json, as published (HuggingFaceTB/SmolLM2-135M), with the
# tiny tokenizer's special ids.
CONFIG: dict[str, Any] = {
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


def checkpoint_files(layers: int) -> dict[str, bytes]:
    from safetensors.numpy import save

    import tinyhub

    config = {
        **CONFIG,
        "num_hidden_layers": layers,
        "bos_token_id": tinyhub.BOS,
        "eos_token_id": tinyhub.EOS,
        "pad_token_id": tinyhub.PAD,
    }
    shapes = tinyhub.parameter_shapes(config)
    shapes.pop("lm_head.weight", None)  # tied: the embedding is the head
    tensors = {
        name: tinyhub.tensor_values(f"kiln-bench/{NAME}", name, shape)
        for name, shape in sorted(shapes.items())
    }
    return {
        "model.safetensors": save(tensors, metadata={"format": "pt"}),
        **tinyhub.text_files(config),
    }


def recipe(target: str, compute: str, digest: str, args: argparse.Namespace) -> str:
    half = compute != "fp32"
    return f"""\
schema_version: 1
description: >-
  Seeded weights of SmolLM2-135M's geometry ({args.layers} layers, hidden 576, 9 heads,
  3 KV heads, vocabulary 49,152), {compute} on the inductor backend for {target}
  (bench/smollm2_shape.py).
task: text-generation
model:
  path: checkpoints/{NAME}
  sha256: {digest}
precision:
  weights: fp32
{"  compute: " + compute if half else ""}
execution:
  variant: ordinary
build:
  backend: inductor
  target: {target}
  max_batch_size: 1
  max_seq_len: {args.max_seq_len}
  prefill_chunk_len: {args.prefill_chunk_len}
validation:
  thresholds: {"half-precision" if half else "fp32-exact"}
  prompts: default
  max_new_tokens: 16
{"  scored_positions: 512" if half else ""}
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--target", default="sm90")
    parser.add_argument("--layers", type=int, default=CONFIG["num_hidden_layers"])
    parser.add_argument("--max-seq-len", type=int, default=1024)
    parser.add_argument("--prefill-chunk-len", type=int, default=128)
    args = parser.parse_args()
    from kiln.pins import tree_digest

    catalog = args.dir / "catalog"
    for folder in ("thresholds", "prompts"):
        shutil.rmtree(catalog / folder, ignore_errors=True)
        shutil.copytree(ROOT / folder, catalog / folder)
    (catalog / "manifests").mkdir(parents=True, exist_ok=True)
    (catalog / "recipes").mkdir(exist_ok=True)
    folder = catalog / "checkpoints" / NAME
    folder.mkdir(parents=True, exist_ok=True)
    files = checkpoint_files(args.layers)
    listing = []
    for path, data in files.items():
        (folder / path).write_bytes(data)
        listing.append((path, hashlib.sha256(data).hexdigest()))
    digest = tree_digest(listing)
    for compute in ("fp32", "bf16"):
        suffix = "" if compute == "fp32" else f"-{compute}"
        host = "h200" if args.target == "sm90" else args.target  # the catalog's own naming
        name = f"{NAME}-inductor{suffix}-{host}"
        (catalog / "recipes" / f"{name}.yaml").write_text(
            recipe(args.target, compute, digest, args)
        )
        print(name)
    size = sum(len(d) for d in files.values()) / 1e6
    print(f"{folder}: {size:.0f} MB, sha256 {digest}")


if __name__ == "__main__":
    main()
