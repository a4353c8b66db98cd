"""What the encoder tasks share (text-classification, feature-extraction): loading the
checkpoint, exporting one encoder forward to ONNX, checking the graph, the
onnxruntime engine and the bundle. Each task's builders name its head's output
(`logits`, `last_hidden_state`) and what its bundle adds (labels, pooling).

The graph contract (runtime/encoder.py relies on it):

    inputs   input_ids [batch, seq] int64
             attention_mask [batch, seq] int64       (1 = real token, 0 = padding)
             token_type_ids [batch, seq] int64       (only where the model has segments)
    outputs  one tensor whose first axis is the batch

Batches are right-padded: absolute position embeddings then see each real token at
the position it has alone, and the mask hides the padding from attention.
"""

from __future__ import annotations

import json
import shutil
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

from builders.common import ort

BUNDLE_SCHEMA = 1


def load(checkpoint: Any, auto_class: str) -> Any:
    """fp32, eager attention, safetensors only (builders/common/hf.py says why)."""
    import torch
    import transformers
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    model = getattr(transformers, auto_class).from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager", use_safetensors=True
    )
    return model.eval()


def input_names(config: Any) -> list[str]:
    # BERT-style models add a segment embedding; feeding zeros is what transformers
    # does when token_type_ids is not given, but the graph must still take it so a
    # caller with two segments can pass them.
    segments = getattr(config, "type_vocab_size", 0) or 0
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if segments > 0 else [])


def export(
    request: Request,
    writer: Writer,
    model: Any,
    output: str,
    output_axes: dict[int, str],
    opset: int,
) -> list[str]:
    """Export `model(**inputs).<output>` to model.onnx; returns the graph's input names.

    Legacy TorchScript exporter (dynamo=False), like the text-generation export: the
    example batch is 2, its second row right-padded, so the exporter neither
    specializes the batch dimension nor drops the mask (FIELD_NOTES)."""
    import torch

    names = input_names(model.config)

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return getattr(self.model(**dict(zip(names, args, strict=True))), output)

    batch, seq = 2, 5
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[1, 3:] = 0  # a right-padded row, so the mask is a live input of the graph
    example = [torch.full((batch, seq), 5, dtype=torch.long), mask]
    example += [torch.zeros(batch, seq, dtype=torch.long)] * (len(names) - 2)
    dynamic: dict[str, dict[int, str]] = {name: {0: "batch", 1: "seq"} for name in names}
    dynamic[output] = output_axes
    request.log(f"exporting {type(model).__name__} to ONNX opset {opset}")
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
            output_names=[output],
            dynamic_axes=dynamic,
            opset_version=opset,
            dynamo=False,
        )
    return names


def check_graph(request: Request, writer: Writer, optimize: bool, output: str, who: str) -> None:
    """The onnx step: optimize, check with shape inference, and record the I/O contract
    (export.json plus the graph's inputs and outputs) in io.json."""
    import onnx

    from builders.common import graph

    source = request.inputs["export"]
    exported = json.loads((source / "export.json").read_text())
    model = onnx.load(str(source / "model.onnx"))
    before = len(model.graph.node)
    if optimize:
        model = graph.tidy(model)
    inputs, outputs = graph.check(model)
    names = [v["name"] for v in inputs]
    wanted = exported.get("graph_outputs", [output])  # Qwen3-VL's vision: DeepStack's too
    if names != exported["graph_inputs"] or [v["name"] for v in outputs] != wanted:
        raise request.error(
            f"the exported graph's inputs {names} break the {who} contract",
            f"this is a kiln bug in builders/{who}/export.py; please report it",
        )
    onnx.save(model, str(writer.path("model.onnx")))
    writer.write_json("io.json", {**exported, "inputs": inputs, "outputs": outputs})
    request.log(f"{before} -> {len(model.graph.node)} nodes, checked")


def engine(request: Any, writer: Any, opts: Any, output: str, shape: tuple[int, ...]) -> None:
    """onnxruntime's offline optimization, saved (builders/common/ort.py), and a smoke run
    at the largest batch, right-padded, whose `output` must have `shape` (batch and seq 4
    filled in for -1, -2)."""
    import numpy as np

    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    ort.check_limits(request, opts.max_seq_len, io)
    provider = ort.provider(request, opts.target)
    session = ort.optimize(source / "model.onnx", writer.path("engine.onnx"), provider)
    batch, seq = opts.max_batch_size, 4
    feeds = {name: np.zeros((batch, seq), np.int64) for name in io["graph_inputs"]}
    feeds["attention_mask"] = np.ones((batch, seq), np.int64)
    feeds["attention_mask"][-1, 2:] = 0
    want = tuple({-1: batch, -2: seq}.get(d, d) for d in shape)
    ort.smoke(request, session, output, feeds, want)
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    ort.engine_json(writer, provider, batch, opts.max_seq_len, file="engine.onnx")


def _pad_id(ckpt: Any, tokenizer: Any) -> int:
    """The tokenizer's pad token, else the config's pad_token_id, else 0. Its value
    never changes an output (the mask hides padding); it only has to be a valid id."""
    tok_config = json.loads((ckpt / "tokenizer_config.json").read_text())
    pad_token = tok_config.get("pad_token")
    pad = tokenizer.token_to_id(pad_token) if isinstance(pad_token, str) else None
    if pad is None:
        pad = json.loads((ckpt / "config.json").read_text()).get("pad_token_id")
    return int(pad or 0)


def bundle(request: Request, writer: Writer, opts: Any, fields: tuple[str, ...]) -> None:
    """The engine, the tokenizer and bundle.json; `fields` are the io.json fields the
    task adds (labels, pooling). runtime/encoder.py loads it with onnxruntime,
    numpy and tokenizers only."""
    from tokenizers import Tokenizer

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
            **{k: io[k] for k in fields},
            "tokenizer": {"file": "tokenizer.json", "pad": _pad_id(ckpt, tokenizer)},
            "limits": {
                "max_batch_size": engine["max_batch_size"],
                "max_seq_len": engine["max_seq_len"],
            },
        },
    )
