"""export (feature-extraction): the encoder's last hidden state as one ONNX graph
(builders/common/encoder.py), and the pooling the checkpoint declares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.common import encoder

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

# sentence-transformers' Pooling config keys, by the mode runtime/embed.py names.
_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
}


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")
    task: str = Field(pattern="^feature-extraction$", description="The recipe's task.")
    hidden: str = Field(pattern="^none$", description="No drafter reads this task's graph.")


def load_encoder(checkpoint: Any) -> Any:
    return encoder.load(checkpoint, "AutoModel")


def pooling(request: Request, checkpoint: Path) -> dict[str, Any]:
    """How token states become one vector: the checkpoint's modules.json (Pooling and
    Normalize modules) and the Pooling module's config.json. Without modules.json,
    mean pooling and no normalization (sentence-transformers' default for a plain
    transformers checkpoint). Modules runtime/embed.py does not run are unsupported."""
    modules_file = checkpoint / "modules.json"
    if not modules_file.is_file():
        return {"mode": "mean", "normalize": False, "source": "default"}
    modules = json.loads(modules_file.read_text())
    kinds = {m["type"].rsplit(".", 1)[-1]: m for m in modules}
    if "Pooling" not in kinds:
        raise request.unsupported("modules.json has no Pooling module; kiln pools with one")
    config = json.loads((checkpoint / kinds["Pooling"]["path"] / "config.json").read_text())
    on = [key for key, value in config.items() if key.startswith("pooling_mode_") and value]
    if len(on) != 1 or on[0] not in _MODES:
        raise request.unsupported(
            f"pooling {on} is not one of {', '.join(_MODES)} alone; runtime/embed.py "
            "implements those"
        )
    extra = set(kinds) - {"Transformer", "Pooling", "Normalize"}
    if extra:
        raise request.unsupported(f"modules.json has modules kiln does not run: {sorted(extra)}")
    return {"mode": _MODES[on[0]], "normalize": "Normalize" in kinds, "source": "modules.json"}


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    pool = pooling(request, checkpoint)
    model = load_encoder(checkpoint)
    axes = {0: "batch", 1: "seq"}
    names = encoder.export(request, writer, model, "last_hidden_state", axes, opts.opset)
    config = model.config
    writer.write_json(
        "export.json",
        {
            "task": "feature-extraction",
            "architecture": type(model).__name__,
            "model_type": config.model_type,
            "graph_inputs": names,
            "hidden_size": config.hidden_size,
            "pooling": pool,
            "vocab_size": config.vocab_size,
            "max_position_embeddings": config.max_position_embeddings,
        },
    )
