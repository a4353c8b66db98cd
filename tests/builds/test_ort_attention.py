"""The fused attention an onnxruntime engine runs (builders/causal_lm/_ort_attention.py):
onnxruntime's GroupQueryAttention, rotating q and k itself, against transformers' own
eager attention, on the inputs the runtime feeds: a left-padded batch, a multi-token
chunk after a past at batch 2, and decode steps; and the graph's logits_to_keep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from conftest import World, heavy

pytestmark = heavy


def folders(world: World, recipe: str) -> dict[str, Path]:
    steps = {s["kind"]: s["key"] for s in world.manifest(recipe)["lock"]["steps"]}
    return {k: world.store / "objects" / v[:2] / v for k, v in steps.items()}


def test_llama_exports_fused_attention_and_qwen3_says_why_it_keeps_its_own(built: World) -> None:
    llama = json.loads((folders(built, "tiny-llama")["export"] / "export.json").read_text())
    assert llama["attention"] == {
        "form": "onnxruntime",
        "layers": 2,
        "why_not": "",
        "packed": False,  # fp32: q+v and k read from the checkpoint's own layout
    }
    assert llama["logits_to_keep"] is True
    import onnx

    engine = onnx.load(
        str(folders(built, "tiny-llama")["engine"] / "engine.onnx"), load_external_data=False
    )
    ops = [n.op_type for n in engine.graph.node]
    assert ops.count("GroupQueryAttention") == 2 and "RotaryEmbedding" not in ops
    qwen3 = json.loads((folders(built, "tiny-qwen3")["export"] / "export.json").read_text())
    assert qwen3["attention"]["form"] == "standard" and qwen3["attention"]["layers"] == 0
    assert "Qwen3Attention.forward is not Llama's" in qwen3["attention"]["why_not"]


def test_the_fused_engine_equals_transformers_on_padding_chunks_and_decode(built: World) -> None:
    import onnxruntime as ort
    import torch
    from transformers import AutoModelForCausalLM, DynamicCache

    found = folders(built, "tiny-llama")
    model = AutoModelForCausalLM.from_pretrained(
        found["fetch"] / "checkpoint", dtype=torch.float32, attn_implementation="eager"
    ).eval()
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(
        str(found["engine"] / "engine.onnx"), so, providers=["CPUExecutionProvider"]
    )
    io = json.loads((found["engine"] / "io.json").read_text())
    entries = io["kv_cache"]["entries"]
    past = [
        np.zeros([{"batch": 2, "seq": 0}.get(d, d) for d in e["shape"]], np.float32)
        for e in entries
    ]
    cache = DynamicCache(config=model.config)
    rng = np.random.default_rng(0)
    # row 0 is 2 tokens shorter (left padding); then a 3-token chunk; then 2 decode steps
    ids = rng.integers(3, 500, (2, 6))
    mask = np.ones((2, 6), np.int64)
    mask[0, :2] = 0
    compared = 0
    for step, width in enumerate((6, 3, 1, 1)):
        if step:
            ids = rng.integers(3, 500, (2, width))
            mask = np.concatenate([mask, np.ones((2, width), np.int64)], axis=1)
        positions = np.maximum(mask.cumsum(axis=1) - 1, 0)[:, -width:]
        feeds: dict[str, Any] = {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": positions,
        }
        feeds.update({e["past"]: p for e, p in zip(entries, past, strict=True)})
        feeds["logits_to_keep"] = np.array(0)
        if width > 1:  # the last position alone: the same numbers as its row of them all
            last = session.run(["logits"], {**feeds, "logits_to_keep": np.array(1)})[0]
        logits, *past = session.run(["logits", *(e["present"] for e in entries)], feeds)
        if width > 1:
            assert last.shape == (2, 1, logits.shape[-1])
            assert np.array_equal(last[:, 0], logits[:, -1])
        with torch.no_grad():
            theirs = model(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                position_ids=torch.from_numpy(positions),
                past_key_values=cache,
                use_cache=True,
            )
        real = mask[:, -width:].astype(bool)  # padded rows' outputs are unspecified
        assert np.abs(logits - theirs.logits.numpy())[real].max() < 1e-4, step
        kv = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        keep = mask.astype(bool)
        for mine, hf in zip(past, kv, strict=True):
            assert mine.shape == hf.shape
            assert np.abs(mine - hf.numpy()).transpose(0, 2, 1, 3)[keep].max() < 1e-5, step
        compared += int(real.sum())
    assert compared == 2 * (6 + 3 + 1 + 1) - 2


def test_the_runtime_keeps_the_cache_in_place_and_generates_what_a_growing_cache_does(
    built: World,
) -> None:
    """bundle.json marks tiny-llama's engine as keeping its cache in place
    (runtime/backends.py SharedCache: past and present bound to one buffer of
    max_seq_len positions). The same bundle with the buffers switched off makes the
    same tokens and logits: a left-padded batch of two, and single prompts through a
    prefix cache whose entries the next generations write over in the buffer."""
    import runtime

    bundle = runtime.open(folders(built, "tiny-llama")["bundle"], threads=1)
    assert bundle.meta["engines"]["main"]["shared_cache"] == {
        "capacity": bundle.meta["limits"]["max_seq_len"]
    }
    engine = bundle.session
    shared = engine.cache
    assert shared is not None
    prompts = [[5, 17, 230, 41, 9, 88], [301, 2, 77]]
    stepped = []  # the decode steps that took the lean path (SharedCache.step)
    lean = shared.step

    def step(*args: Any) -> Any:
        logits = lean(*args)
        stepped.append(logits is not None)
        return logits

    shared.step = step  # type: ignore[method-assign]
    runs = {}
    for mode in ("grown", "in place"):
        engine.cache = shared if mode == "in place" else None
        batch = bundle.generate(prompts, max_new_tokens=24).tokens
        bundle.enable_prefix_cache()
        first = bundle.generate([prompts[0] + [12, 13]], max_new_tokens=24).tokens
        second = bundle.generate([prompts[0] + [12, 99, 4]], max_new_tokens=24).tokens
        reused = bundle.last_reused
        logits = bundle.logits(prompts[0] + [12, 99, 4])
        runs[mode] = (batch, first, second, reused, logits)
        bundle.prefix_cache = None
    (batch, first, second, reused, logits), other = runs["in place"], runs["grown"]
    assert reused == len(prompts[0]) + 1  # the second prompt reused the first's prefix
    assert (batch, first, second, reused) == other[:4]
    assert np.abs(logits - other[4]).max() < 1e-5
    # every token after each generation's first came from a lean step, in place
    assert stepped and all(stepped)
    assert len(stepped) == sum(max(map(len, run)) - 1 for run in (batch, first, second))
    assert shared.buffers and shared.buffers[0].shape[2] == shared.capacity
