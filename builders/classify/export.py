"""export (text-classification): the encoder and its head as one ONNX graph
(builders/common/encoder.py: the exporter and its example batch)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.common import encoder

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")
    hidden: str = Field(pattern="^none$", description="No drafter reads this task's graph.")


def load_classifier(checkpoint: Any) -> Any:
    return encoder.load(checkpoint, "AutoModelForSequenceClassification")


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    model = load_classifier(request.inputs["checkpoint"] / "checkpoint")
    names = encoder.export(request, writer, model, "logits", {0: "batch"}, opts.opset)
    config = model.config
    writer.write_json(
        "export.json",
        {
            "task": "text-classification",
            "architecture": type(model).__name__,
            "model_type": config.model_type,
            "graph_inputs": names,
            "labels": [config.id2label[i] for i in range(config.num_labels)],
            "vocab_size": config.vocab_size,
            "max_position_embeddings": config.max_position_embeddings,
        },
    )
