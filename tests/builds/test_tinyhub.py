"""Embedded tiny checkpoints: deterministic bytes, a pinned revision, a real tokenizer."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from conftest import ROOT, heavy

import tinyhub


def test_weights_are_a_pure_function_of_repo_name_and_shape() -> None:
    a = tinyhub.tensor_values("kiln-tiny/llama", "model.layers.0.mlp.up_proj.weight", (128, 64))
    b = tinyhub.tensor_values("kiln-tiny/llama", "model.layers.0.mlp.up_proj.weight", (128, 64))
    c = tinyhub.tensor_values("kiln-tiny/qwen3", "model.layers.0.mlp.up_proj.weight", (128, 64))
    assert a.tobytes() == b.tobytes()
    assert a.tobytes() != c.tobytes()
    # Pinned: these bytes must not change with numpy, Python or the machine.
    assert hashlib.sha256(a.tobytes()).hexdigest() == (
        "4783123a3ac06dcf204cac4100859c0d5fad47fb50d9ef6822f073047b169017"
    )


def test_norm_scales_center_on_one() -> None:
    w = tinyhub.tensor_values("kiln-tiny/llama", "model.norm.weight", (64,))
    assert w.min() > 0.89 and w.max() < 1.11


@heavy
def test_mirror_revisions_match_the_pinned_recipes(hub: Path) -> None:
    made = {
        repo: (tinyhub.repo_dir(hub, repo) / "refs" / "main").read_text() for repo in tinyhub.SPECS
    }
    pinned = {}
    for path in (ROOT / "recipes").glob("*.yaml"):
        model = yaml.safe_load(path.read_text()).get("model")  # absent: `extends` sets it
        if model and tinyhub.is_tiny(model.get("repo", "")):  # a packaged one has no repo
            pinned[model["repo"]] = model["revision"]
    assert pinned, "no tiny recipes found"
    for repo, revision in pinned.items():
        assert made[repo] == revision, f"{repo}: mirror {made[repo]}, recipe pins {revision}"


@heavy
def test_mirror_has_hub_cache_layout(hub: Path) -> None:
    root = tinyhub.repo_dir(hub, "kiln-tiny/llama")
    revision = (root / "refs" / "main").read_text()
    assert len(revision) == 40 and "\n" not in revision
    snapshot = root / "snapshots" / revision
    for link in snapshot.iterdir():
        assert link.is_symlink()
        blob = link.resolve()
        assert blob.parent == root / "blobs"
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


@heavy
def test_generating_twice_gives_identical_revisions(tmp_path: Path, hub: Path) -> None:
    again = tinyhub.write_mirror(tmp_path)
    for repo, revision in again.items():
        assert (tinyhub.repo_dir(hub, repo) / "refs" / "main").read_text() == revision


@heavy
def test_checkpoint_loads_offline_with_huggingface_hub_and_transformers(hub: Path) -> None:
    import torch
    from huggingface_hub import snapshot_download
    from transformers import AutoModelForCausalLM, AutoTokenizer

    revision = (tinyhub.repo_dir(hub, "kiln-tiny/qwen3") / "refs" / "main").read_text()
    path = snapshot_download(
        "kiln-tiny/qwen3", revision=revision, cache_dir=hub, local_files_only=True
    )
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    ids = tok("The quick brown fox", return_tensors="pt")["input_ids"]
    assert tok.decode(ids[0]) == "The quick brown fox"
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 512)
    assert torch.isfinite(logits).all()


@heavy
def test_every_tiny_tokenizer_file_encodes_as_transformers_does(hub: Path) -> None:
    """The bundle tokenizes with the checkpoint's tokenizer.json; the reference with
    whatever transformers loads for the model type (Qwen2Tokenizer imposes its own
    digit-splitting pre-tokenizer). Every tiny text checkpoint must agree on the
    shipped prompts, or its validation measures tokenizers, not the engine."""
    from huggingface_hub import snapshot_download
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    prompts = yaml.safe_load((ROOT / "prompts" / "default.yaml").read_text())["prompts"]
    checked = []
    for repo in sorted(tinyhub.SPECS):
        path = snapshot_download(repo, cache_dir=hub, local_files_only=True)
        ours = Tokenizer.from_file(f"{path}/tokenizer.json")
        theirs = AutoTokenizer.from_pretrained(path)
        for text in prompts:
            assert ours.encode(text).ids == theirs(text)["input_ids"], (repo, text)
        checked.append(repo)
    assert "kiln-tiny/qwen2" in checked and len(checked) >= 20


def test_a_slice_is_the_same_values_as_the_whole_tensor() -> None:
    """Slices are what bench/shape.py generates an 8B checkpoint from, in parallel."""
    shape = (3000, 700)  # past the generator's 1M-value pass
    whole = tinyhub.tensor_values("kiln-tiny/llama", "x.weight", shape).ravel()
    for start, count in ((0, 5), (1_048_570, 20), (2_099_990, 10)):
        part = tinyhub.tensor_slice("kiln-tiny/llama", "x.weight", shape, start, count)
        assert part.tobytes() == whole[start : start + count].tobytes()


def _shape_tool() -> Any:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("bench_shape", ROOT / "bench" / "shape.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_shape"] = module  # its dataclass and its workers' pickles name it
    spec.loader.exec_module(module)
    return module


@heavy
def test_the_shape_tools_streamed_weights_are_safetensors_own_bytes(tmp_path: Path) -> None:
    """bench/shape.py writes each slice at its offset from worker processes; the file
    is byte for byte what safetensors.save makes of tinyhub's values (rounded to bf16
    for a bf16 checkpoint), so the SmolLM2 catalog kept its digest."""
    import ml_dtypes
    from safetensors.numpy import save

    shape_tool: Any = _shape_tool()
    shape_tool.SLICE = 1000  # many slices a tensor, two processes
    for dtype, cast in (("F32", None), ("BF16", ml_dtypes.bfloat16)):
        shape = shape_tool.Shape("t", {**tinyhub.SPECS["kiln-tiny/qwen3"]}, dtype, (), 1, "")
        config = shape_tool.model_config(shape, 1)
        path = tmp_path / f"{dtype}.safetensors"
        shape_tool.write_weights(path, shape, config, workers=2)
        tensors = {
            name: tinyhub.tensor_values("kiln-bench/t", name, dims)
            for name, dims in tinyhub.parameter_shapes(config).items()
        }
        if cast is not None:
            tensors = {name: t.astype(cast) for name, t in tensors.items()}
        assert path.read_bytes() == save(tensors, metadata={"format": "pt"}), dtype


@heavy
def test_the_qwen3_8b_shape_is_qwen3_8bs_geometry() -> None:
    """Qwen3-8B's parameters as transformers names them: 8,190,735,360 (the model card's
    8.2 B), its q/k norms included; untied, so lm_head is a tensor of its own."""
    shape_tool: Any = _shape_tool()
    config = shape_tool.model_config(shape_tool.SHAPES["qwen3-8b"], 36)
    shapes = tinyhub.parameter_shapes(config)
    total = sum(int(np.prod(dims)) for dims in shapes.values())
    assert total == 8_190_735_360
    assert shapes["lm_head.weight"] == (151936, 4096)
    assert shapes["model.layers.35.self_attn.k_norm.weight"] == (128,)
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (1024, 4096)
