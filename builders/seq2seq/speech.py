"""Speech encoder-decoders (Whisper, task automatic-speech-recognition): what the
export and the reference do differently from text (the graph contract is in
builders/seq2seq/__init__.py).

The encoder graph also projects every decoder layer's cross-attention keys and
values from its hidden states, with that layer's own k_proj and v_proj, so they are
computed once per input. The decoder graph receives them as a filled cross cache:
transformers' WhisperAttention reads a cross cache whose `is_updated` is set instead
of projecting `encoder_hidden_states` (modeling_whisper.py, transformers 5.24), so
the hidden states it is given only switch cross-attention on and are never read.
validate measures both graphs against transformers, which would catch a wrong
projection or layout.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from builders.seq2seq._graph import cache_entries, decoder_axes, decoder_cache, example_past, flat

if TYPE_CHECKING:
    from kiln.store.api import Writer


def frames(model: Any) -> int:
    """Feature frames the encoder takes: its positions times the conv strides
    (WhisperEncoder refuses any other length)."""
    encoder = model.get_encoder()
    return int(
        model.config.max_source_positions * encoder.conv1.stride[0] * encoder.conv2.stride[0]
    )


def _cross_cache(model: Any, hidden: Any) -> list[Any]:
    """[key, value] per decoder layer, [batch, heads, positions, head_dim]."""
    out = []
    for layer in model.get_decoder().layers:
        attn = layer.encoder_attn
        shape = (hidden.shape[0], -1, attn.num_heads, attn.head_dim)
        out += [attn.k_proj(hidden).view(shape).transpose(1, 2)]
        out += [attn.v_proj(hidden).view(shape).transpose(1, 2)]
    return out


def _cross_entries(cross: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "layer": j // 2,
            "kind": ("key", "value")[j % 2],
            "name": f"cross.{j // 2}.{('key', 'value')[j % 2]}",
            "shape": ["batch", *t.shape[1:]],
        }
        for j, t in enumerate(cross)
    ]


def export(model: Any, writer: Writer, opset: int, log: Any) -> dict[str, Any]:
    """Write encoder.onnx and decoder.onnx; return what export.json records."""
    import torch

    config = model.config
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(2, config.num_mel_bins, frames(model), generator=generator)
    with torch.no_grad():
        hidden = model.get_encoder()(input_features=features).last_hidden_state
        cross = _cross_cache(model, hidden)
        start = torch.zeros(2, 3, dtype=torch.long)
        out = model(encoder_outputs=(hidden,), decoder_input_ids=start)
    entries = cache_entries(out.past_key_values.self_attention_cache.layers)
    crossed = _cross_entries(cross)
    layers = len(entries) // 2

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_features: Any) -> Any:
            hidden = self.model.get_encoder()(input_features=input_features)[0]
            return (hidden, *_cross_cache(self.model, hidden))

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, decoder_input_ids: Any, *kv: Any) -> Any:
            past, cross = kv[: 2 * layers], kv[2 * layers :]
            unread = cross[0].new_zeros(decoder_input_ids.shape[0], 1, config.d_model)
            out = self.model(
                encoder_outputs=(unread,),
                decoder_input_ids=decoder_input_ids,
                cache=decoder_cache(past, cross),
                use_cache=True,
            )
            return (out.logits, *flat(out.past_key_values.self_attention_cache.layers))

    past = example_past(entries)
    names = {
        "past": [e["past"] for e in entries],
        "present": [e["present"] for e in entries],
        "cross": [e["name"] for e in crossed],
    }
    batch = {0: "batch"}
    log(f"exporting {type(model).__name__} encoder and decoder to ONNX opset {opset}")
    # Tracer warnings are about shape bookkeeping frozen into the trace: features have
    # one length, and validate measures the graphs.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Encoder(),
            (features,),
            str(writer.path("encoder.onnx")),
            input_names=["input_features"],
            output_names=["encoder_hidden", *names["cross"]],
            dynamic_axes={n: batch for n in ("input_features", "encoder_hidden", *names["cross"])},
            opset_version=opset,
            dynamo=False,
        )
        torch.onnx.export(
            Decoder(),
            (torch.ones(2, 4, dtype=torch.long), *past, *cross),
            str(writer.path("decoder.onnx")),
            input_names=["decoder_input_ids", *names["past"], *names["cross"]],
            output_names=["logits", *names["present"]],
            dynamic_axes={**decoder_axes(entries), **{n: batch for n in names["cross"]}},
            opset_version=opset,
            dynamo=False,
        )
    return {
        "task": "automatic-speech-recognition",
        "inputs": {
            "encoder": ["input_features"],
            "decoder": ["decoder_input_ids", *names["past"], *names["cross"]],
        },
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "decoder_start_token_id": config.decoder_start_token_id,
        "d_model": int(hidden.shape[-1]),
        "features": {"num_mel_bins": config.num_mel_bins, "frames": frames(model)},
        "kv_cache": {"layout": ["batch", "heads", "seq", "head_dim"], "entries": entries},
        "cross_cache": {"layout": ["batch", "heads", "positions", "head_dim"], "entries": crossed},
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_target_positions,
    }


def features(checkpoint: Any, clips: list[str]) -> list[Any]:
    """The [1, mel, frames] features of each shipped clip, by transformers' own
    feature extractor (the checkpoint's preprocessor_config.json)."""
    from transformers import AutoFeatureExtractor

    from builders.data import audio
    from runtime.audio import read_wav

    extractor = AutoFeatureExtractor.from_pretrained(checkpoint)
    rate = extractor.sampling_rate
    return [
        extractor(read_wav(audio.path(c), rate), sampling_rate=rate, return_tensors="pt")[
            "input_features"
        ]
        for c in clips
    ]
