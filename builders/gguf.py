"""import: a GGUF file becomes a transformers checkpoint.

transformers' GGUF loader (`from_pretrained(folder, gguf_file=...)`, with the `gguf`
package) reads the config, the tokenizer with its chat template, and the weights,
dequantizing them to `dtype`. Its model refuses `save_pretrained` ("quantized with
gguf and is not serializable"), so a plain model is built from the same config and
given the dequantized state dict (every key must match), then saved as safetensors
beside the tokenizer's files, its data starting on a page (weights.align_header: the
graphs read the weights in place, and an unaligned start slowed SmolLM2's fp32 decode
by a sixth). Later steps read the artifact as they read a fetched
Hugging Face checkpoint: `checkpoint/` and `files.json`.

The GGUF's own quantization (e.g. Q4_1) is read from its metadata and recorded, so a
lock says what the weights are: Q4_1-derived values stored in fp32, not a Hub revision.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.common.weights import align_header
from kiln.pins import sha256_file

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str = Field(pattern="^gguf$", description="What is imported.")
    dtype: str = Field(pattern="^float32$", description="What the weights are dequantized to.")


def quantization(gguf_file: Path) -> str:
    """The file's quantization as llama.cpp names it (general.file_type), e.g. Q4_1."""
    import gguf

    reader = gguf.GGUFReader(str(gguf_file))
    field = reader.fields.get("general.file_type")
    if field is None:
        return "unknown"
    value = int(field.parts[field.data[0]][0])
    name = gguf.LlamaFileType(value).name
    return name.removeprefix("MOSTLY_")


def build(request: Request, writer: Writer) -> None:
    import os

    os.environ.setdefault("TQDM_DISABLE", "1")  # the loader's own bars: this step logs
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    Options.model_validate(request.options)
    source = request.inputs["source"] / "checkpoint"
    found = sorted(source.glob("*.gguf"))
    if len(found) != 1:
        raise request.error(f"expected one .gguf file, found {len(found)}", "kiln bug")
    folder, name = found[0].parent, found[0].name
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    kind = quantization(found[0])
    request.log(f"{name}: {kind} GGUF; dequantizing to float32 with transformers' GGUF loader")
    try:
        config = AutoConfig.from_pretrained(folder, gguf_file=name)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        gguf_model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32
        )
    except (ValueError, KeyError, NotImplementedError) as exc:  # an architecture it lacks
        raise request.error(
            f"transformers' GGUF loader cannot read {name}: {exc}",
            "kiln imports the GGUF architectures transformers supports (llama, qwen2, ...)",
        ) from None
    state = gguf_model.state_dict()
    del gguf_model
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    try:  # strict: a missing or unexpected tensor raises
        plain.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise request.error(
            f"{name}: transformers' GGUF model does not match its own config: {exc}",
            "this is a kiln or transformers bug; please report it with the GGUF's name",
        ) from None
    out = writer.path("checkpoint/config.json").parent
    plain.save_pretrained(out, safe_serialization=True)
    for weights_file in sorted(out.glob("*.safetensors")):  # read in place by the graphs
        align_header(weights_file)
    tokenizer.save_pretrained(out)
    files: list[dict[str, Any]] = [
        {"path": p.name, "sha256": sha256_file(p), "size": p.stat().st_size}
        for p in sorted(out.iterdir())
        if p.is_file()
    ]
    versions = {}
    from importlib import metadata

    for dist in ("transformers", "gguf", "torch"):
        versions[dist] = metadata.version(dist)
    writer.write_json(
        "files.json",
        {
            "format": "gguf",
            "quantization": kind,
            "dtype": "float32",
            "converter": versions,
            "files": files,
        },
    )
    params = sum(t.numel() for t in plain.parameters())
    request.log(f"{name}: {params / 1e6:.0f} M parameters, {len(files)} files written")
