"""Embedded tiny checkpoints: deterministic bytes, a pinned revision, a real tokenizer."""

from __future__ import annotations

import hashlib
from pathlib import Path

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
