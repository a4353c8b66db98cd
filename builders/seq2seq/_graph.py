"""What the text and speech exports share (builders/seq2seq/export.py and speech.py):
the decoder's self-attention cache, observed, fed and flattened in graph order, and
the decoder graph's dynamic axes. The graph contracts are in builders/seq2seq/__init__.py.
"""

from __future__ import annotations

from typing import Any


def decoder_axes(entries: list[Any]) -> dict[str, dict[int, str]]:
    """Dynamic axes every decoder graph shares: tokens, logits and the growing cache."""
    return {
        "decoder_input_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
        **{e["past"]: {0: "batch", 2: "past"} for e in entries},
        **{e["present"]: {0: "batch", 2: "total"} for e in entries},
    }


def cache_entries(layers: Any) -> list[Any]:
    """The self-attention cache's I/O names and observed shapes, keys then values."""
    entries = []
    for i, layer in enumerate(layers):
        for kind, t in (("key", layer.keys), ("value", layer.values)):
            entries.append(
                {
                    "layer": i,
                    "kind": kind,
                    "past": f"past.{i}.{kind}",
                    "present": f"present.{i}.{kind}",
                    "shape": ["batch", t.shape[1], "seq", t.shape[3]],
                }
            )
    return entries


def example_past(entries: list[Any]) -> list[Any]:
    """The export's example cache: batch 2 and 3 cached positions, so neither axis is
    specialized away (FIELD_NOTES)."""
    import torch

    return [torch.zeros(*[{"batch": 2, "seq": 3}.get(d, d) for d in e["shape"]]) for e in entries]


def decoder_cache(past: tuple[Any, ...], cross: tuple[Any, ...] = ()) -> Any:
    """Self-attention cache holding `past` (key, value per layer). Without `cross`,
    an empty cross-attention cache, so cross-attention keys and values are computed
    from encoder_hidden; with it, a filled one, which attention reads instead
    (EncoderDecoderCache marks its layers is_updated)."""
    from transformers import DynamicCache, EncoderDecoderCache

    caches = DynamicCache(), DynamicCache()
    for cache, tensors in zip(caches, (past, cross), strict=True):
        for j in range(0, len(tensors), 2):
            cache.update(tensors[j], tensors[j + 1], j // 2)
    return EncoderDecoderCache(*caches)


def flat(layers: Any) -> list[Any]:
    """A cache's tensors in graph order: key then value, layer by layer."""
    return [t for layer in layers for t in (layer.keys, layer.values)]
