"""The tiny vision-language checkpoints load and run with transformers' own processor
and model, their prompts hold as many image tokens as the vision tower makes, and
their output depends on the image (a fixture that ignored it would test nothing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT, heavy

import tinyhub

pytestmark = heavy

IMAGE = ROOT / "builders" / "data" / "images" / "circle_64x48.png"
QUESTION = "What is in the picture?"


def snapshot(hub: Path, repo: str) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo, cache_dir=hub, local_files_only=True))


def processor(folder: Path) -> Any:
    """transformers' processor of the checkpoint, as the build loads it
    (builders/common/hf.py load_processor: Qwen2-VL's, Qwen2.5-VL's and InternVL's classes
    without the video processor that needs torchvision, which the build extra lacks)."""
    from builders.common.hf import load_processor

    return load_processor(folder)


def prompt(proc: Any, image: Any) -> Any:
    messages = [
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": QUESTION}],
        }
    ]
    return proc.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )


@pytest.mark.parametrize("repo", sorted(tinyhub.VLMS))
def test_the_prompt_holds_the_image_and_the_answer_depends_on_it(hub: Path, repo: str) -> None:
    import torch
    import transformers
    from PIL import Image, ImageOps

    folder = snapshot(hub, repo)
    proc = processor(folder)
    model_class = getattr(transformers, tinyhub.VLMS[repo]["architectures"][0])
    model, info = model_class.from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    picture = Image.open(IMAGE).convert("RGB")
    inputs = prompt(proc, picture)

    ids = inputs["input_ids"][0].tolist()
    vision = {k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs}
    with torch.no_grad():  # InternVL's: [tiles, tokens, hidden]; the others' per image
        features = torch.cat(list(model.get_image_features(**vision).pooler_output))
    assert ids.count(model.config.image_token_id) == features.shape[0] > 1
    assert QUESTION in proc.tokenizer.decode(ids)

    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
        logits = model(**inputs).logits[0, -1]
        other = model(**prompt(proc, ImageOps.invert(picture))).logits[0, -1]
    assert len(ids) < out.shape[1] <= len(ids) + 8  # gemma3-vlm says EOS second
    assert torch.isfinite(logits).all() and torch.isfinite(other).all()
    assert (logits - other).abs().max().item() > 1e-3


def _pins(node: Any) -> Iterator[tuple[str, str]]:
    """(repo, revision) of every model a recipe names: its model, its draft, ..."""
    if isinstance(node, dict):
        if isinstance(node.get("repo"), str) and "revision" in node:
            yield node["repo"], node["revision"]
        for value in node.values():
            yield from _pins(value)
    elif isinstance(node, list):
        for value in node:
            yield from _pins(value)


def test_the_vision_language_checkpoints_leave_every_pinned_tiny_revision_alone(
    hub: Path,
) -> None:
    pinned = {
        (repo, revision)
        for path in (ROOT / "recipes").glob("*.yaml")
        for repo, revision in _pins(yaml.safe_load(path.read_text()))
        if tinyhub.is_tiny(repo)
    }
    assert len(pinned) >= 30 and {repo for repo, _ in pinned} & set(tinyhub.VLMS) == {
        "kiln-tiny/llava",  # recipes/tiny-llava*.yaml pin the VLMs they build
        "kiln-tiny/gemma3-vlm",  # and recipes/tiny-gemma3-vlm*.yaml
        "kiln-tiny/qwen2.5-vl",  # and recipes/tiny-qwen2.5-vl.yaml
        "kiln-tiny/qwen2-vl",  # and recipes/tiny-qwen2-vl.yaml
        "kiln-tiny/qwen3-vl",  # and recipes/tiny-qwen3-vl.yaml
        "kiln-tiny/idefics3",  # and recipes/tiny-idefics3.yaml
        "kiln-tiny/internvl",  # and recipes/tiny-internvl.yaml
    }
    for repo, revision in sorted(pinned):
        assert (tinyhub.repo_dir(hub, repo) / "refs" / "main").read_text() == revision, repo
