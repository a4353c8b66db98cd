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
    precision: dict[str, str] = Field(description="Recipe precision, recorded for readers.")
    speculative: dict[str, Any] = Field(
        default_factory=dict,
        description="Drafting parameters (max_draft_len, ...); empty when the variant "
        "does not draft.",
    )
    task: str = Field(pattern="^text-generation$", description="The recipe's task.")


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
    pad_token = tok_config.get("pad_token")
    pad = tokenizer.token_to_id(pad_token) if isinstance(pad_token, str) else None
    if pad is None:
        pad = (token_ids(generation.get("pad_token_id", config.get("pad_token_id"))) or eos)[0]
    shutil.copyfile(engine_dir / engine["file"], writer.path(engine["file"]))
    shutil.copyfile(ckpt / "tokenizer.json", writer.path("tokenizer.json"))
    meta = {
        "schema_version": BUNDLE_SCHEMA,
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
            }
        },
        "io": {"inputs": io["inputs"], "outputs": io["outputs"], "kv_cache": io["kv_cache"]},
        "tokenizer": {
            "file": "tokenizer.json",
            "add_bos": bool(tok_config.get("add_bos_token", False)),
            "bos": next(iter(token_ids(config.get("bos_token_id"))), None),
            "eos": eos,
            "pad": pad,
        },
        "limits": {
            "max_batch_size": engine["max_batch_size"],
            "max_seq_len": engine["max_seq_len"],
        },
    }
    meta["vocab_size"] = io["vocab_size"]
    extend(request, writer, meta, opts.speculative)
    writer.write_json("bundle.json", meta)
