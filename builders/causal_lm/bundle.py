"""bundle: gather the engine and the tokenizer, and describe them in bundle.json.

A bundle is self-contained: the runtime loads it on a machine that never built
it, with onnxruntime, numpy and tokenizers only.
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.causal_lm._bundle_variants import extend
from builders.common.files import place
from builders.common.hf import token_ids

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

BUNDLE_SCHEMA = 1


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variant: str = Field(
        pattern="^(ordinary|draft|ngram|lora|mtp|eagle3|dflash|dspark)$",
        description="Execution variant.",
    )
    precision: dict[str, str | int] = Field(description="Recipe precision, recorded for readers.")
    speculative: dict[str, Any] = Field(
        default_factory=dict,
        description="Drafting parameters (max_draft_len, ...); empty when the variant "
        "does not draft.",
    )
    task: str = Field(
        pattern="^(text-generation|image-text-to-text)$", description="The recipe's task."
    )
    prompt_policy: dict[str, Any] = Field(
        default_factory=dict,
        description="What prompts the runtime accepts (charset, max_chars); empty: any.",
    )
    prefill_chunk_len: int = Field(
        0,
        ge=0,
        description="onnxruntime: the runtime feeds a prompt in chunks of this many tokens "
        "(build.prefill_chunk_len; 0: one pass).",
    )


def _shared_cache(engine: dict[str, Any], io: dict[str, Any]) -> dict[str, Any]:
    """engines.main.shared_cache, for an onnxruntime engine whose every present is
    GroupQueryAttention's (the export's fused attention, io.json `attention`): the
    runtime may then keep the cache in place, one buffer of max_seq_len positions per
    cached tensor (runtime/backends.py SharedCache)."""
    attention = io.get("attention", {})
    layers = {e["layer"] for e in io["kv_cache"]["entries"]}
    fused = attention.get("form") == "onnxruntime" and attention.get("layers") == len(layers)
    if engine["backend"] != "onnxruntime" or not fused:
        return {}
    return {"shared_cache": {"capacity": engine["max_seq_len"]}}


def chat_template(ckpt: Any, tok_config: dict[str, Any]) -> str | None:
    """The checkpoint's chat template: chat_template.jinja, else tokenizer_config's
    chat_template (a string, or named templates of which 'default' is the one)."""
    file = ckpt / "chat_template.jinja"
    if file.is_file():
        return str(file.read_text(encoding="utf-8"))
    found = tok_config.get("chat_template")
    if isinstance(found, list):
        found = next((t.get("template") for t in found if t.get("name") == "default"), None)
    return found if isinstance(found, str) and found else None


def special_tokens(tok_config: dict[str, Any]) -> dict[str, Any]:
    """What transformers passes a chat template besides the messages (its
    special_tokens_map): bos_token, eos_token, ... as strings."""
    out: dict[str, Any] = {}
    for key, value in tok_config.items():
        if key.endswith("_token") and isinstance(value, dict):
            value = value.get("content")
        if key.endswith("_token") and isinstance(value, str):
            out[key] = value
    extra = tok_config.get("additional_special_tokens") or tok_config.get("extra_special_tokens")
    if isinstance(extra, list) and all(isinstance(t, str) for t in extra):
        out["additional_special_tokens"] = list(extra)
    return out


def _chat(writer: Writer, ckpt: Any, tok_config: dict[str, Any], tokenizer: Any) -> Any:
    """bundle.json's "chat" (the template file, its special tokens, whether it has a
    thinking switch, the end-of-turn ids), or None for a checkpoint without one."""
    template = chat_template(ckpt, tok_config)
    if template is None:
        return None
    writer.write_bytes("chat_template.jinja", template.encode("utf-8"))
    special = special_tokens(tok_config)
    eos = special.get("eos_token")
    end = tokenizer.token_to_id(eos) if isinstance(eos, str) else None
    return {
        "template": "chat_template.jinja",
        "special_tokens": special,
        "thinking": "enable_thinking" in template,
        "end_of_turn": [end] if end is not None else [],
    }


def _vision(request: Request, writer: Writer, ckpt: Any, decoder: dict[str, Any]) -> dict[str, Any]:
    """A vision-language bundle's vision program (input `vision`, builders/vision/) as
    vision.onnx, the checkpoint's preprocessor_config.json (and its
    video_preprocessor_config.json, where it has one), which runtime/images.py reads, and
    bundle.json's "vision": what the runtime needs to turn image files into
    the features the decoder merges at the image token, and whether the decoder's
    image tokens attend both ways (`decoder`: its io.json)."""
    source = request.inputs["vision"]
    engine = json.loads((source / "engine.json").read_text())
    io = json.loads((source / "io.json").read_text())
    shutil.copyfile(source / engine["file"], writer.path("vision.onnx"))
    shutil.copyfile(ckpt / "preprocessor_config.json", writer.path("preprocessor_config.json"))
    video = ckpt / "video_preprocessor_config.json"  # where the checkpoint has its own
    if video.is_file():
        shutil.copyfile(video, writer.path(video.name))
    return {
        "engine": {
            "file": "vision.onnx",
            "backend": engine["backend"],
            "backend_version": engine["version"],
            "provider": engine["provider"],
        },
        "processor": "preprocessor_config.json",
        **({"video_processor": video.name} if video.is_file() else {}),
        "image_token_id": io["image_token_id"],
        "tokens_per_image": io["tokens_per_image"],
        "hidden_size": io["hidden_size"],
        "image_placeholder": io["image_placeholder"],
        "image_sequence": io["image_sequence"],
        "image_attention": decoder.get("image_attention", "causal"),
        # a grid vision program (Qwen2.5-VL: builders/vision/_grid.py) and its decoder's
        # (t, h, w) positions, which the runtime computes (runtime/mrope.py)
        **{k: io[k] for k in ("layout", "grid", "vision_start_token_id") if k in io},
        **({"position_axes": 3} if decoder.get("position_axes") == 3 else {}),
    }


def adds_bos(tok_config: dict[str, Any], tokenizer: Any, bos: int | None) -> bool:
    """Does the reference's tokenizer (transformers, add_special_tokens=True) start a
    text with BOS? tokenizer_config.json's add_bos_token when it says; else what the
    tokenizer.json's own post-processor does. transformers 5 saves Gemma 3's GGUF
    tokenizer with a post-processor that adds <bos> and no add_bos_token: reading the
    config alone, the gemma-3-270m bundle dropped it and matched no prompt."""
    if "add_bos_token" in tok_config:
        return bool(tok_config["add_bos_token"])
    plain = tokenizer.encode("a", add_special_tokens=False).ids
    return bos is not None and tokenizer.encode("a").ids == [bos, *plain]


def build(request: Request, writer: Writer) -> None:
    from tokenizers import Tokenizer

    opts = Options.model_validate(request.options)
    engine_dir = request.inputs["engine"]
    ckpt = request.inputs["checkpoint"] / "checkpoint"
    engine = json.loads((engine_dir / "engine.json").read_text())
    io = json.loads((engine_dir / "io.json").read_text())
    config = json.loads((ckpt / "config.json").read_text())
    gen_path = ckpt / "generation_config.json"
    generation = json.loads(gen_path.read_text()) if gen_path.exists() else {}
    tok_config = json.loads((ckpt / "tokenizer_config.json").read_text())
    if not (ckpt / "tokenizer.json").exists():
        raise request.error(
            "the checkpoint has no tokenizer.json", "use a fast-tokenizer checkpoint"
        )
    tokenizer = Tokenizer.from_file(str(ckpt / "tokenizer.json"))

    eos = token_ids(generation.get("eos_token_id", config.get("eos_token_id")))
    bos = next(iter(token_ids(config.get("bos_token_id"))), None)
    pad_token = tok_config.get("pad_token")
    pad = tokenizer.token_to_id(pad_token) if isinstance(pad_token, str) else None
    if pad is None:
        pad = (token_ids(generation.get("pad_token_id", config.get("pad_token_id"))) or eos)[0]
    for name in [engine["file"], *engine.get("data", [])]:  # the graph and its weights
        place(engine_dir / name, writer.path(name))  # linked: published, read-only
    shutil.copyfile(ckpt / "tokenizer.json", writer.path("tokenizer.json"))
    meta = {
        "schema_version": BUNDLE_SCHEMA,
        **({"task": opts.task} if opts.task != "text-generation" else {}),
        "variant": opts.variant,
        "precision": opts.precision,
        "architecture": io["architecture"],
        "quantization": io.get("quantization"),
        "engines": {
            "main": {
                "file": engine["file"],
                "backend": engine["backend"],
                "backend_version": engine["version"],
                "provider": engine["provider"],
                **_shared_cache(engine, io),
                **(
                    {"tensor_parallel": engine["tensor_parallel"]}
                    if "tensor_parallel" in engine
                    else {}
                ),
            }
        },
        "io": {"inputs": io["inputs"], "outputs": io["outputs"], "kv_cache": io["kv_cache"]},
        "tokenizer": {
            "file": "tokenizer.json",
            "add_bos": adds_bos(tok_config, tokenizer, bos),
            "bos": bos,
            "eos": eos,
            "pad": pad,
        },
        "limits": {
            "max_batch_size": engine["max_batch_size"],
            "max_seq_len": engine["max_seq_len"],
        },
    }
    if opts.prefill_chunk_len:
        meta["limits"]["prefill_chunk_len"] = opts.prefill_chunk_len
    meta["vocab_size"] = io["vocab_size"]
    chat = _chat(writer, ckpt, tok_config, tokenizer)
    if chat is not None:
        meta["chat"] = chat
    if opts.prompt_policy:
        meta["prompt_policy"] = opts.prompt_policy
    if "vision" in request.inputs:
        meta["vision"] = _vision(request, writer, ckpt, io)
    if "drafter" in io:  # an inductor engine holds its drafter (backends/_drafter.py)
        meta["drafter"] = {**io["drafter"], "d2t": None}
    extend(request, writer, meta, opts.speculative)
    writer.write_json("bundle.json", meta)
