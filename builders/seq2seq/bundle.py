"""bundle (text2text-generation, automatic-speech-recognition): both engines, the
tokenizer and bundle.json; a speech bundle also records the feature extractor's
settings (the checkpoint's preprocessor_config.json), which runtime/audio.py reads.

runtime/seq2seq.py loads it with onnxruntime, numpy and tokenizers only.
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.common.hf import token_ids
from builders.seq2seq import SPEECH, TASK_PATTERN

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

BUNDLE_SCHEMA = 1


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variant: str = Field(pattern="^ordinary$", description="Execution variant.")
    precision: dict[str, str] = Field(description="Recipe precision, recorded for readers.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")


def _audio(request: Request, ckpt: Any, io: dict[str, Any]) -> dict[str, Any]:
    """A speech bundle's feature settings, checked against what the encoder takes."""
    from runtime.audio import FIELDS

    path = ckpt / "preprocessor_config.json"
    if not path.is_file():
        raise request.error(
            "the checkpoint has no preprocessor_config.json", "use a checkpoint with its processor"
        )
    pre = json.loads(path.read_text())
    audio = {k: pre[k] for k in FIELDS}
    want = io["features"]
    if (audio["feature_size"], audio["n_samples"] // audio["hop_length"]) != (
        want["num_mel_bins"],
        want["frames"],
    ):
        raise request.error(
            f"preprocessor_config.json gives {audio['feature_size']} mel bins x "
            f"{audio['n_samples'] // audio['hop_length']} frames; the encoder takes "
            f"{want['num_mel_bins']} x {want['frames']}",
            "the checkpoint's feature extractor and config disagree; fix the checkpoint",
        )
    return audio


def build(request: Request, writer: Writer) -> None:
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
    eos = token_ids(generation.get("eos_token_id", config.get("eos_token_id")))
    pad = token_ids(generation.get("pad_token_id", config.get("pad_token_id"))) or eos
    speech_io, speech = {}, {}
    if opts.task == SPEECH:
        speech_io, speech = {"cross_cache": io["cross_cache"]}, {"audio": _audio(request, ckpt, io)}
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
            "io": {"graphs": io["graphs"], "kv_cache": io["kv_cache"], **speech_io},
            **speech,
            "decoder_start_token_id": io["decoder_start_token_id"],
            "tokenizer": {"file": "tokenizer.json", "eos": eos, "pad": pad[0]},
            "limits": {
                "max_batch_size": engine["max_batch_size"],
                "max_seq_len": engine["max_seq_len"],
            },
        },
    )
