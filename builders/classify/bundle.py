"""bundle (text-classification): the engine, the tokenizer and bundle.json.

runtime/classifier.py loads it with onnxruntime, numpy and tokenizers only.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

BUNDLE_SCHEMA = 1


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variant: str = Field(pattern="^ordinary$", description="Execution variant.")
    precision: dict[str, str] = Field(description="Recipe precision, recorded for readers.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")


def _pad_id(ckpt: Any, tokenizer: Any) -> int:
    """The tokenizer's pad token, else the config's pad_token_id, else 0. Its value
    never changes an output (the mask hides padding); it only has to be a valid id."""
    tok_config = json.loads((ckpt / "tokenizer_config.json").read_text())
    pad_token = tok_config.get("pad_token")
    pad = tokenizer.token_to_id(pad_token) if isinstance(pad_token, str) else None
    if pad is None:
        pad = json.loads((ckpt / "config.json").read_text()).get("pad_token_id")
    return int(pad or 0)


def build(request: Any, writer: Any) -> None:
    from tokenizers import Tokenizer

    opts = Options.model_validate(request.options)
    engine_dir = request.inputs["engine"]
    ckpt = request.inputs["checkpoint"] / "checkpoint"
    engine = json.loads((engine_dir / "engine.json").read_text())
    io = json.loads((engine_dir / "io.json").read_text())
    if not (ckpt / "tokenizer.json").exists():
        raise request.error(
            "the checkpoint has no tokenizer.json", "use a fast-tokenizer checkpoint"
        )
    tokenizer = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    shutil.copyfile(engine_dir / engine["file"], writer.path("engine.onnx"))
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
                "main": {
                    "file": "engine.onnx",
                    "backend": engine["backend"],
                    "backend_version": engine["version"],
                    "provider": engine["provider"],
                }
            },
            "io": {"inputs": io["inputs"], "outputs": io["outputs"]},
            "labels": io["labels"],
            "tokenizer": {"file": "tokenizer.json", "pad": _pad_id(ckpt, tokenizer)},
            "limits": {
                "max_batch_size": engine["max_batch_size"],
                "max_seq_len": engine["max_seq_len"],
            },
        },
    )
