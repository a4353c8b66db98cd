"""export (text-classification): the encoder and its head as one ONNX graph.

Legacy TorchScript exporter (dynamo=False), like the text-generation export: the
example batch is 2, its second row right-padded, so the exporter neither
specializes the batch dimension nor drops the mask (FIELD_NOTES).
"""

from __future__ import annotations

import warnings
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")


def load_classifier(checkpoint: Any) -> Any:
    """fp32, eager attention, safetensors only (builders/_hf.py says why)."""
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    model = AutoModelForSequenceClassification.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager", use_safetensors=True
    )
    return model.eval()


def input_names(config: Any) -> list[str]:
    # BERT-style models add a segment embedding; feeding zeros is what transformers
    # does when token_type_ids is not given, but the graph must still take it so a
    # caller with two segments can pass them.
    segments = getattr(config, "type_vocab_size", 0) or 0
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if segments > 0 else [])


def build(request: Any, writer: Any) -> None:
    import torch

    opts = Options.model_validate(request.options)
    model = load_classifier(request.inputs["checkpoint"] / "checkpoint")
    names = input_names(model.config)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args, strict=True))).logits

    batch, seq = 2, 5
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, 3:] = 0  # a right-padded row, so the mask is a live input of the graph
    example = [torch.full((batch, seq), 5, dtype=torch.long), mask]
    example += [torch.zeros(batch, seq, dtype=torch.long)] * (len(names) - 2)
    dynamic = {name: {0: "batch", 1: "seq"} for name in names}
    dynamic["logits"] = {0: "batch"}
    request.log(f"exporting {type(model).__name__} to ONNX opset {opts.opset}")
    # The tracer warns about mask-building Python branches frozen into the trace;
    # they are the same for every shape the runtime feeds, and validate checks the
    # graph against the reference at many lengths and paddings.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Encoder(),
            tuple(example),
            str(writer.path("model.onnx")),
            input_names=names,
            output_names=["logits"],
            dynamic_axes=dynamic,
            opset_version=opts.opset,
            dynamo=False,
        )
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
