"""bundle (text2text-generation): both engines, the tokenizer and bundle.json.

runtime/seq2seq.py loads it with onnxruntime, numpy and tokenizers only.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from builders.bundle import _ids

BUNDLE_SCHEMA = 1


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variant: str = Field(pattern="^ordinary$", description="Execution variant.")
    precision: dict[str, str] = Field(description="Recipe precision, recorded for readers.")
    task: str = Field(pattern="^text2text-generation$", description="The recipe's task.")


def build(request: Any, writer: Any) -> None:
    opts = Options.model_validate(request.options)
    engine_dir = request.inputs["engine"]
    ckpt = request.inputs["checkpoint"] / "checkpoint"
    engine = json.loads((engine_dir / "engine.json").read_text())
    io = json.loads((engine_dir / "io.json").read_text())
    config = json.loads((ckpt / "config.json").read_text())
    gen_path = ckpt / "generation_config.json"
    generation = json.loads(gen_path.read_text()) if gen_path.exists() else {}
    if not (ckpt / "tokenizer.json").exists():
        raise request.error(
            "the checkpoint has no tokenizer.json", "use a fast-tokenizer checkpoint"
        )
    eos = _ids(generation.get("eos_token_id", config.get("eos_token_id")))
    pad = _ids(generation.get("pad_token_id", config.get("pad_token_id"))) or eos
    for name, file in engine["files"].items():
        shutil.copyfile(engine_dir / file, writer.path(f"{name}.onnx"))
    shutil.copyfile(ckpt / "tokenizer.json", writer.path("tokenizer.json"))
    writer.write_json(
        "bundle.json",
        {
            "schema_version": BUNDLE_SCHEMA,
            "task": opts.task,
            "variant": opts.variant,
            "precision": opts.precision,
            "architecture": io["architecture"],
            "engines": {
                name: {
                    "file": f"{name}.onnx",
                    "backend": engine["backend"],
                    "backend_version": engine["version"],
                    "provider": engine["provider"],
                }
                for name in engine["files"]
            },
            "io": {"graphs": io["graphs"], "kv_cache": io["kv_cache"]},
            "decoder_start_token_id": io["decoder_start_token_id"],
            "tokenizer": {"file": "tokenizer.json", "eos": eos, "pad": pad[0]},
            "limits": {
                "max_batch_size": engine["max_batch_size"],
                "max_seq_len": engine["max_seq_len"],
            },
        },
    )
