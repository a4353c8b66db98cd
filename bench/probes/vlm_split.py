"""Does the graph split every VLM runtime uses hold for kiln's tiny LLaVA on CPU with
onnxruntime (issue 40, before the builder family is written)? Three pieces, each
checked against transformers on the same image and prompt:

  pixels   runtime/images.py's numpy preprocessing against the checkpoint's processor
  vision   pixel values -> image features (vision tower + projector), one ONNX graph
  decoder  the language model on input embeddings with an explicit KV cache, one ONNX
           graph; the merge (token embeddings with the image features written at the
           image-token rows) in numpy between the two

then a greedy decode through the pieces against transformers' generate with the image,
and the last prompt position's logits for a second image (the split must not lose the
image: they move where transformers' move).

    .venv/bin/python bench/probes/vlm_split.py [--image FILE] [--other FILE] [--new 8]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "builders" / "data" / "images"
REPO = "kiln-tiny/llava"
QUESTION = "What is in the picture?"


def _checkpoint(tmp: Path) -> Path:
    import tinyhub

    revision = tinyhub.write_repo(tmp, REPO)
    return tinyhub.repo_dir(tmp, REPO) / "snapshots" / revision


def _export(
    module: Any,
    args: tuple[Any, ...],
    path: Path,
    names: tuple[list[str], list[str]],
    dynamic: dict[str, dict[int, str]],
) -> float:
    import torch

    start = time.perf_counter()
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=names[0],
        output_names=names[1],
        dynamic_axes=dynamic,
        opset_version=19,
        dynamo=False,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", type=Path, default=IMAGES / "circle_64x48.png")
    parser.add_argument("--other", type=Path, default=IMAGES / "square_200x120.jpg")
    parser.add_argument("--new", type=int, default=8)
    args = parser.parse_args()
    import onnxruntime as ort
    import torch
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    from runtime import images

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        folder = _checkpoint(tmp / "hub")
        processor = AutoProcessor.from_pretrained(folder, backend="pil")
        model = LlavaForConditionalGeneration.from_pretrained(folder).eval().requires_grad_(False)
        config = json.loads((folder / "preprocessor_config.json").read_text())
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": QUESTION}]}
        ]
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True)

        def inputs(image: Path) -> Any:
            pil = images.load(image)
            return processor(images=[pil], text=prompt, return_tensors="pt")

        ref_in = inputs(args.image)
        ours = images.pixel_values([args.image], config)["pixel_values"]
        gap = np.abs(ours - ref_in["pixel_values"].numpy()).max()
        print(f"pixels: max |ours - processor| {gap:.2e}")

        # vision: pixel values -> features [images * tokens, hidden]
        class Vision(torch.nn.Module):
            def forward(self, pixel_values: Any) -> Any:
                out = model.model.get_image_features(pixel_values=pixel_values)
                feats = out.pooler_output if hasattr(out, "pooler_output") else out
                feats = torch.cat(list(feats), dim=0) if isinstance(feats, (list, tuple)) else feats
                return feats.reshape(-1, feats.shape[-1])

        vision_path = tmp / "vision.onnx"
        seconds = _export(
            Vision().eval(),
            (torch.from_numpy(ours),),
            vision_path,
            (["pixel_values"], ["image_features"]),
            {"pixel_values": {0: "images"}, "image_features": {0: "rows"}},
        )
        vision = ort.InferenceSession(str(vision_path), providers=["CPUExecutionProvider"])
        (features,) = vision.run(None, {"pixel_values": ours})
        with torch.no_grad():
            want = Vision()(ref_in["pixel_values"]).numpy()
        print(
            f"vision: exported in {seconds:.1f} s; features {features.shape}, "
            f"max |onnx - torch| {np.abs(features - want).max():.2e}"
        )

        # decoder on input embeddings with an explicit cache (DynamicCache in, out)
        lm = model.model.language_model
        head = model.lm_head
        text = model.config.text_config
        layers, kv, dim = text.num_hidden_layers, text.num_key_value_heads, text.head_dim

        class Decoder(torch.nn.Module):
            def forward(self, embeds: Any, mask: Any, positions: Any, *past: Any) -> Any:
                from transformers import DynamicCache

                cache = DynamicCache(config=text)
                for i in range(layers):
                    cache.update(past[2 * i], past[2 * i + 1], i)
                out = lm(
                    inputs_embeds=embeds,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                )
                present = [
                    t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)
                ]
                return (head(out.last_hidden_state), *present)

        names_in = ["inputs_embeds", "attention_mask", "position_ids"]
        names_out = ["logits"]
        dynamic: dict[str, dict[int, str]] = {
            "inputs_embeds": {0: "batch", 1: "seq"},
            "attention_mask": {0: "batch", 1: "total"},
            "position_ids": {0: "batch", 1: "seq"},
            "logits": {0: "batch", 1: "seq"},
        }
        example_past = []
        for i in range(layers):
            for kind in ("key", "value"):
                names_in.append(f"past.{i}.{kind}")
                names_out.append(f"present.{i}.{kind}")
                dynamic[names_in[-1]] = {0: "batch", 2: "past"}
                dynamic[names_out[-1]] = {0: "batch", 2: "total"}
                example_past.append(torch.zeros(2, kv, 3, dim))
        example = (
            torch.zeros(2, 4, text.hidden_size),
            torch.ones(2, 7, dtype=torch.long),
            torch.arange(3, 7).expand(2, 4).contiguous(),
            *example_past,
        )
        decoder_path = tmp / "decoder.onnx"
        seconds = _export(Decoder().eval(), example, decoder_path, (names_in, names_out), dynamic)
        decoder = ort.InferenceSession(str(decoder_path), providers=["CPUExecutionProvider"])
        table = model.get_input_embeddings().weight.detach().numpy()
        token = model.config.image_token_id
        print(f"decoder: exported in {seconds:.1f} s; {len(names_in)} inputs")

        def merge(ids: np.ndarray, feats: np.ndarray) -> np.ndarray:
            embeds = table[ids].copy()
            rows = np.nonzero(ids[0] == token)[0]
            if len(rows) != feats.shape[0]:
                raise SystemExit(
                    f"{len(rows)} image tokens in the prompt, {feats.shape[0]} features"
                )
            embeds[0, rows] = feats
            return embeds

        def greedy(ids: np.ndarray, feats: np.ndarray, new: int) -> tuple[list[int], np.ndarray]:
            past = [np.zeros((1, kv, 0, dim), np.float32) for _ in range(2 * layers)]
            embeds, out, first = merge(ids, feats), [], None
            seen = ids.shape[1]
            positions = np.arange(seen)[None]
            for _ in range(new):
                mask = np.ones((1, seen), np.int64)
                logits, *past = decoder.run(
                    None,
                    {
                        "inputs_embeds": embeds,
                        "attention_mask": mask,
                        "position_ids": positions,
                        **dict(zip(names_in[3:], past, strict=True)),
                    },
                )
                first = logits[0, -1] if first is None else first
                nxt = int(logits[0, -1].argmax())
                out.append(nxt)
                embeds, positions, seen = table[[[nxt]]], np.array([[seen]]), seen + 1
            return out, first

        ids = ref_in["input_ids"].numpy()
        got, got_last = greedy(ids, features, args.new)
        with torch.no_grad():
            ref = model.generate(**ref_in, max_new_tokens=args.new, do_sample=False)
            ref_last = model(**ref_in).logits[0, -1].numpy()
        want_ids = ref[0, ids.shape[1] :].tolist()
        print(
            f"decode: {args.new} greedy tokens, split {got} vs transformers {want_ids}: "
            f"{'equal' if got == want_ids else 'DIFFERENT'}; last prompt logits max |diff| "
            f"{np.abs(got_last - ref_last).max():.2e}"
        )

        other_in = inputs(args.other)
        (other_feats,) = vision.run(
            None, {"pixel_values": images.pixel_values([args.other], config)["pixel_values"]}
        )
        _, other_last = greedy(other_in["input_ids"].numpy(), other_feats, 1)
        with torch.no_grad():
            ref_other = model(**other_in).logits[0, -1].numpy()
        print(
            f"image sensitivity: last logits move by {np.abs(got_last - other_last).max():.3f} "
            f"through the split, {np.abs(ref_last - ref_other).max():.3f} in transformers"
        )


if __name__ == "__main__":
    main()
