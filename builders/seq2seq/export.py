"""export (text2text-generation, automatic-speech-recognition): encoder.onnx and
decoder.onnx with a self-attention KV cache (the contracts are in
builders/seq2seq/__init__.py; speech models export in builders/seq2seq/speech.py).

Legacy TorchScript exporter (dynamo=False), batch-2 examples with a right-padded
row and a non-empty past, so no dynamic axis is specialized away (FIELD_NOTES).
The decoder's cache shapes are observed from one forward pass, not assumed.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.seq2seq import SPEECH, TASK, TASK_PATTERN
from builders.seq2seq._graph import cache_entries, decoder_axes, decoder_cache, example_past, flat

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

DECODER_INPUTS = ["decoder_input_ids", "encoder_hidden", "encoder_attention_mask"]


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")
    hidden: str = Field(pattern="^none$", description="No drafter reads this task's graph.")


def load_seq2seq(checkpoint: Any, task: str = TASK) -> Any:
    """fp32, eager attention, safetensors only (builders/common/hf.py says why). Speech
    models (Whisper) have their own auto class."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    auto = AutoModelForSpeechSeq2Seq if task == SPEECH else AutoModelForSeq2SeqLM
    model = auto.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager", use_safetensors=True
    )
    return model.eval()


def _example(model: Any) -> tuple[Any, Any, list[dict[str, Any]]]:
    """Encoder example inputs and the observed self-attention cache entries."""
    import torch

    ids = torch.full((2, 5), 5, dtype=torch.long)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    with torch.no_grad():
        hidden = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        start = torch.zeros(2, 3, dtype=torch.long)
        out = model(encoder_outputs=(hidden,), attention_mask=mask, decoder_input_ids=start)
    return (ids, mask), hidden, cache_entries(out.past_key_values.self_attention_cache.layers)


def build(request: Request, writer: Writer) -> None:
    import torch

    opts = Options.model_validate(request.options)
    model = load_seq2seq(request.inputs["checkpoint"] / "checkpoint", opts.task)
    if opts.task == SPEECH:
        from builders.seq2seq.speech import export

        writer.write_json("export.json", export(model, writer, opts.opset, request.log))
        return
    (ids, mask), hidden, entries = _example(model)
    encoder = model.get_encoder()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, decoder_input_ids: Any, hidden: Any, enc_mask: Any, *past: Any) -> Any:
            out = self.model(
                encoder_outputs=(hidden,),
                attention_mask=enc_mask,
                decoder_input_ids=decoder_input_ids,
                cache=decoder_cache(past),
                use_cache=True,
            )
            return (out.logits, *flat(out.past_key_values.self_attention_cache.layers))

    past = example_past(entries)
    past_names = [e["past"] for e in entries]
    present_names = [e["present"] for e in entries]
    src = {0: "batch", 1: "src"}
    dec_dynamic = {
        "encoder_hidden": src,
        "encoder_attention_mask": src,
        **decoder_axes(entries),
    }
    request.log(f"exporting {type(model).__name__} encoder and decoder to ONNX opset {opts.opset}")
    # Tracer warnings are about mask and cache bookkeeping frozen into the trace; the
    # same for every shape the runtime feeds, and validate measures the graphs.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Encoder(),
            (ids, mask),
            str(writer.path("encoder.onnx")),
            input_names=["input_ids", "attention_mask"],
            output_names=["encoder_hidden"],
            dynamic_axes={"input_ids": src, "attention_mask": src, "encoder_hidden": src},
            opset_version=opts.opset,
            dynamo=False,
        )
        torch.onnx.export(
            Decoder(),
            (torch.ones(2, 4, dtype=torch.long), hidden, mask, *past),
            str(writer.path("decoder.onnx")),
            input_names=DECODER_INPUTS + past_names,
            output_names=["logits", *present_names],
            dynamic_axes=dec_dynamic,
            opset_version=opts.opset,
            dynamo=False,
        )
    config = model.config
    writer.write_json(
        "export.json",
        {
            "task": TASK,
            "inputs": {
                "encoder": ["input_ids", "attention_mask"],
                "decoder": DECODER_INPUTS + past_names,
            },
            "architecture": type(model).__name__,
            "model_type": config.model_type,
            "decoder_start_token_id": config.decoder_start_token_id,
            "d_model": int(hidden.shape[-1]),
            "kv_cache": {"layout": ["batch", "heads", "seq", "head_dim"], "entries": entries},
            "vocab_size": config.vocab_size,
            # T5 has relative positions and no such limit; the engine checks it if set.
            "max_position_embeddings": getattr(config, "max_position_embeddings", None),
        },
    )
