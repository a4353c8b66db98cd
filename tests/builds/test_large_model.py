"""A model past protobuf's 2 GiB limit builds: about 600 M seeded fp32 parameters (2.4
GB) from a local folder pinned by its digest, through export, onnx, engine and bundle,
validated with a few greedy tokens against transformers. Every graph keeps its weights
as external data beside it: the checkpoint's own safetensors file, which every step's
artifact holds hardlinked (builders/common/weights.py).

Nightly (KILN_NIGHTLY=1, `make nightly`): about 6 minutes and 12 GB of disk on 2 cores.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from conftest import World, heavy, make_world, nightly

pytestmark = [heavy, nightly]

# A Llama of 9 layers at hidden 2048 and intermediate 8192 over the tiny vocabulary:
# 9 x (4 x 2048^2 + 3 x 2048 x 8192) + 2 x 512 x 2048 = 604 M parameters, 2.42 GB.
GEOMETRY = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 9,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "head_dim": 128,
    "tie_word_embeddings": False,
}


def seeded_checkpoint(folder: Path, hub: Path) -> int:
    """The tiny Llama's tokenizer and configs with GEOMETRY's weights, seeded."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    tiny = next((hub / "models--kiln-tiny--llama" / "snapshots").iterdir())
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(tiny / name, folder / name)
    config = AutoConfig.from_pretrained(tiny)
    for key, value in GEOMETRY.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(folder, safe_serialization=True, max_shard_size="100GB")
    return sum(p.numel() for p in model.parameters())


def test_a_model_past_two_gib_builds_and_decodes(tmp_path: Path, hub: Path) -> None:
    world: World = make_world(tmp_path, hub, ("tiny-llama",))
    folder = world.root / "checkpoints" / "big-llama"
    params = seeded_checkpoint(folder, hub)
    assert params > 2**31 / 4  # past 2 GiB at fp32
    data = world.recipe("tiny-llama")
    data["description"] = "A seeded 600 M-parameter Llama past protobuf's 2 GiB limit."
    data["model"] = world.local_model(folder)
    data["validation"]["max_new_tokens"] = 4
    data["validation"]["prompts"] = "default"
    world.write_recipe("big-llama", data)
    world.doit("build", "recipe=big-llama", check=True)
    evidence = world.manifest("big-llama")["evidence"][-1]
    assert evidence["verdict"] == "pass", evidence
    steps = {s["kind"]: s["key"] for s in world.manifest("big-llama")["lock"]["steps"]}
    fetched = world.store / "objects" / steps["fetch"][:2] / steps["fetch"] / "checkpoint"
    assert (fetched / "model.safetensors").stat().st_size > 2**31  # one file past 2 GiB
    for kind, graph in (
        ("export", "model.onnx"),
        ("onnx", "model.onnx"),
        ("engine", "engine.onnx"),
        ("bundle", "engine.onnx"),
    ):
        where = world.store / "objects" / steps[kind][:2] / steps[kind]
        assert (where / graph).stat().st_size < 10_000_000, kind  # the graph alone
        # its weights: the checkpoint's own file beside it, stored once
        assert os.path.samefile(where / "model.safetensors", fetched / "model.safetensors"), kind
    bundle = world.store / "objects" / steps["bundle"][:2] / steps["bundle"]
    meta = json.loads((bundle / "bundle.json").read_text())
    assert meta["engines"]["main"]["file"] == "engine.onnx"
