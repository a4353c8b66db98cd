"""The KV-cache contract of a causal LM, observed from one forward pass.

Architectures cache different things: grouped-query attention caches
[batch, kv_heads, seq, head_dim] for keys and values alike; DeepseekV3's MLA caches
keys and values of different widths (FIELD_NOTES: read real cache shapes from one
forward pass rather than assuming them); Gemma3, Cohere2 and Exaone4 interleave
sliding-window layers. So the export does not assume a shape: it runs the model
once and records, per layer, the shape of each cached tensor. The runtime reads
those shapes back from bundle.json.

Sliding-window layers are exported with a full (growing) cache: the window is
applied by the attention mask, which transformers builds from absolute positions,
so the numbers are the reference's; only memory grows past the window. A cache that
crops itself would freeze its crop point into the traced graph.

Gemma 4's KV-shared layers cache nothing: within a forward they attend to the keys
and values the last earlier layer of their type returned from the cache (past and new
alike), so only the layers before them are carried.

DSA layers (DeepseekV32, GlmMoeDsa) cache indexer keys as well: not carried yet,
so they are unsupported here too.

Recurrent layers (Mamba conv/ssm state, gated-delta-net state) are not a growing
sequence, and transformers' prefill and decode paths for them branch in Python on
`has_previous_state`: one traced graph cannot serve both, so they are unsupported
here (request.unsupported, with the exact reason).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request

SEQ_AXIS = 2  # DynamicLayer concatenates on dim -2 of [batch, heads, seq, dim]


def observe(request: Request, model: Any) -> list[dict[str, Any]]:
    """One entry per cached tensor: layer, kind (key/value), names and shape, with
    "batch" and "seq" where those axes are. A cache kiln cannot carry is unsupported."""
    import torch
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    _refuse_recurrent(request, cache, model)
    _refuse_indexed(request, cache, model)
    ids = torch.ones(2, 3, dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, cache=cache, use_cache=True)
    entries = []
    shared = _kv_shared(model)
    for i, layer in enumerate(out.past_key_values.layers):
        if i in shared:
            continue  # reads an earlier layer's keys and values within the forward
        for kind, tensor in (("key", layer.keys), ("value", layer.values)):
            if tensor is None or tensor.dim() != 4 or tensor.shape[SEQ_AXIS] != 3:
                raise request.unsupported(
                    f"layer {i} of {type(model).__name__} caches a {kind} of shape "
                    f"{tuple(tensor.shape) if tensor is not None else None}, not "
                    "[batch, heads, seq, dim]; kiln's export carries only growing KV caches"
                )
            shape: list[Any] = ["batch", tensor.shape[1], "seq", tensor.shape[3]]
            entries.append(
                {
                    "layer": i,
                    "kind": kind,
                    "past": f"past.{i}.{kind}",
                    "present": f"present.{i}.{kind}",
                    "shape": shape,
                    "sliding_window": getattr(layer, "sliding_window", None),
                }
            )
    return entries


def _kv_shared(model: Any) -> set[int]:
    """Layers that cache nothing: Gemma 4's KV-shared layers attend to the keys and values
    the last earlier layer of their type computed in the same forward
    (Gemma4TextConfig.kv_sharing_modes "reuse"), so the graph carries no cache for them."""
    config = model.config.get_text_config()
    shared = getattr(config, "num_kv_shared_layers", 0)
    modes = getattr(config, "kv_sharing_modes", None) if shared else None
    return {i for i, mode in enumerate(modes or []) if mode == "reuse"}


def _refuse_indexed(request: Request, cache: Any, model: Any) -> None:
    indexed = [i for i, layer in enumerate(cache.layers) if hasattr(layer, "indexer_keys")]
    if indexed:
        raise request.unsupported(
            f"{type(model).__name__} layers {indexed} keep a third cache, the DSA indexer keys "
            "[batch, seq, index_head_dim], next to keys and values; kiln's export carries "
            "keys and values only"
        )


def _refuse_recurrent(request: Request, cache: Any, model: Any) -> None:
    linear = [i for i, flag in enumerate(getattr(cache, "is_linear", [])) if flag]
    if linear:
        raise request.unsupported(
            f"{type(model).__name__} layers {linear} carry recurrent state (conv and "
            "ssm/linear-attention state), and transformers' prefill and decode paths for "
            "them branch in Python on has_previous_state, so one traced ONNX graph cannot "
            "serve both; kiln's export is a single KV-cache graph (a separate prefill and "
            "decode graph would be needed)"
        )


def full_cache(past: tuple[Any, ...], entries: list[dict[str, Any]]) -> Any:
    """A DynamicCache of plain (never cropping) layers holding `past`."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for j in range(0, len(entries), 2):
        cache.update(past[j], past[j + 1], entries[j]["layer"])
    return cache


def example(entries: list[dict[str, Any]], batch: int, length: int) -> list[Any]:
    import torch

    return [
        torch.zeros(*[{"batch": batch, "seq": length}.get(d, d) for d in e["shape"]])
        for e in entries
    ]
