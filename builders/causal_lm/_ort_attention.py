"""Attention as onnxruntime's own fused kernels, for graphs an onnxruntime engine runs.

Traced as transformers writes it, one Llama attention layer of a decode step is about
40 ONNX nodes: the rotary embedding's Slice/Neg/Concat/Mul/Add on q and k, the cache's
Concat, the query/key/value Reshape/Transpose, two MatMuls, Softmax and the mask's Add.
On SmolLM2-135M (30 layers) that is 1,445 nodes per decode step against
onnxruntime-genai's 309, and the extra nodes' kernels and executor hand-offs are the
whole of its lead in fp32 (bench/probes/step_profile.py: kiln's weight products take 31.6 ms
of a step, onnxruntime-genai's 35.0; everything else 17.6 ms against 5.0).

`fused(model)` replaces the forward of each layer whose attention is transformers'
standard Llama attention (the class's forward, and the rotary helpers of its module,
equal to Llama's by source, eager attention, a static rotary table) with one that
writes, per layer, one `com.microsoft.GroupQueryAttention` over the past cache, which
also rotates q and k (`do_rotary`, from cos/sin tables of every position, at the
graph's own position_ids), and whose present outputs are the cache the graph returns.
The kernel onnxruntime-genai's model builder writes, in the graph contract kiln's
runtime already speaks (builders/causal_lm/export.py):

- the model's own additive mask [batch, 1, seq, total] goes in as `attention_bias`,
  so left padding, sliding windows written into the mask and every chunk shape keep
  the model's semantics; GroupQueryAttention's causal mask agrees with it;
- seqlens_k is total - 1 and query_seqlens is seq for every row (no right padding):
  query_seqlens is what lets onnxruntime take batch > 1 for a chunk after a past;
- where q, k and v are slices of one fused projection (the AWQ precisions calibrate
  them as one: builders/common/siblings.py), its output goes in whole, as the
  packed query, and nothing splits it.

Rotating inside the attention kernel gives the same bits as a RotaryEmbedding node
before it (checked on left-padded batches, chunks after a past and decode steps),
and a 30-layer decode step runs 60 nodes fewer.

An onnxruntime whose GroupQueryAttention has no `query_seqlens` or `attention_bias`
input (an older one, such as the GPU host's) gets the standard form: `supported()`
says why, the export records it (export.json `attention`), and onnxruntime's version
is in the export step's key (kiln.plan.toolchain LIBRARIES), so each host's choice is
its own artifact. A layer that is not standard keeps its own forward, with the reason.
The patch lives for the export only; the reference never sees it, and the validate
step compares the fused graph with the unpatched eager model as always.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from builders.common.siblings import packed, same_source

# optional GroupQueryAttention inputs the fused form writes (onnxruntime 1.30 lacks query_seqlens)
NEEDED = ("cos_cache", "sin_cache", "position_ids", "attention_bias", "query_seqlens")
STATIC_ROPE = ("default", "linear", "llama3")
QKV = ("q_proj", "k_proj", "v_proj")


@dataclass
class Fused:
    """What the export fused: the layers, or why none were."""

    layers: list[int] = field(default_factory=list)
    why_not: str = ""
    packed: bool = False  # q, k and v come from one fused projection

    def summary(self) -> dict[str, Any]:
        form = "onnxruntime" if self.layers else "standard"
        return {
            "form": form,
            "layers": len(self.layers),
            "why_not": self.why_not,
            "packed": self.packed,
        }


def supported() -> str:
    """'' when the installed onnxruntime's GroupQueryAttention takes every input the
    fused form writes at the positions it writes them; else why not."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C
    except ImportError as exc:
        return f"onnxruntime is not importable here ({exc})"
    import onnxruntime

    for schema in C.get_all_operator_schema():
        if schema.name == "GroupQueryAttention" and schema.domain == "com.microsoft":
            names = [i.name for i in schema.inputs]
            missing = [n for n in NEEDED if n not in names]
            if missing:
                return (
                    f"onnxruntime {onnxruntime.__version__}'s GroupQueryAttention has no "
                    f"{' or '.join(missing)} input"
                )
            if names[: len(INPUTS)] != list(INPUTS):
                version = onnxruntime.__version__
                return f"onnxruntime {version} orders GroupQueryAttention's inputs otherwise"
            return ""
    return f"onnxruntime {onnxruntime.__version__} has no com.microsoft GroupQueryAttention"


# GroupQueryAttention's inputs in onnxruntime 1.32's schema order, up to the last used
INPUTS = (
    "query",
    "key",
    "value",
    "past_key",
    "past_value",
    "seqlens_k",
    "total_sequence_length",
    "cos_cache",
    "sin_cache",
    "position_ids",
    "attention_bias",
    "head_sink",
    "k_scale",
    "v_scale",
    "q_norm_weight",
    "k_norm_weight",
    "query_seqlens",
)


def _why_not_layer(module: Any) -> str:
    """'' when `module` is a standard Llama attention layer; else why not."""
    from transformers.models.llama import modeling_llama as llama

    kind = type(module)
    if not all(hasattr(module, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")):
        return f"{kind.__name__} has no q/k/v/o projections"
    # modelopt wraps a quantized model's attention to quantize its matmul inputs (an
    # fp8 KV cache): with every such quantizer off, the wrapped forward is the layer's
    bmm = [getattr(module, f"{t}_bmm_quantizer", None) for t in "qkvp"]
    if any(q is not None and q.is_enabled for q in bmm):
        return f"{kind.__name__} quantizes its attention matmuls (modelopt)"
    if any(q is not None for q in bmm):
        kind = next((c for c in kind.__mro__ if c.__module__.startswith("transformers.")), kind)
    if not same_source(kind.forward, llama.LlamaAttention.forward):
        return f"{kind.__name__}.forward is not Llama's"
    home = importlib.import_module(kind.__module__)
    for helper in ("apply_rotary_pos_emb", "rotate_half"):
        theirs = getattr(home, helper, None)
        if theirs is None or not same_source(theirs, getattr(llama, helper)):
            return f"{kind.__module__}.{helper} is not Llama's"
    if module.config._attn_implementation != "eager":
        return f"attention implementation {module.config._attn_implementation!r}"
    return ""


def _tables(model: Any, device: Any) -> tuple[Any, Any] | str:
    """cos and sin [max_position_embeddings, head_dim / 2] from the model's own rotary
    module (its scaling included), or why they cannot be tables."""
    import torch

    inner = getattr(model, "model", None)  # a VLM's decoder: model.model.language_model
    rotary = getattr(inner, "rotary_emb", None) or getattr(
        getattr(inner, "language_model", None), "rotary_emb", None
    )
    if rotary is None:
        return "the model has no model.rotary_emb (nor model.language_model.rotary_emb)"
    kind = getattr(rotary, "rope_type", None)
    if kind not in STATIC_ROPE:
        return f"rotary type {kind!r} is not a static table"
    text = model.config.get_text_config(decoder=True)
    positions = torch.arange(text.max_position_embeddings, device=device)[None]
    probe = torch.zeros(1, dtype=torch.float32, device=device)
    cos, sin = rotary(probe, positions)
    cos, sin = cos[0].float(), sin[0].float()
    half = cos.shape[-1] // 2
    halves = torch.equal(cos[:, :half], cos[:, half:]) and torch.equal(sin[:, :half], sin[:, half:])
    if not halves:
        return "the rotary table is not two equal halves (interleaved or partial rotary)"
    return cos[:, :half].contiguous(), sin[:, :half].contiguous()


def _rotate(x: Any, positions: Any, cos: Any, sin: Any) -> Any:
    """transformers' apply_rotary_pos_emb on x [b, s, heads * dim], from the tables."""
    import torch

    b, s, width = x.shape
    dim = 2 * cos.shape[-1]
    c = torch.cat([cos[positions]] * 2, dim=-1).unsqueeze(2)  # [b, s, 1, dim]
    n = torch.cat([sin[positions]] * 2, dim=-1).unsqueeze(2)
    x4 = x.view(b, s, width // dim, dim)
    half = torch.cat((-x4[..., dim // 2 :], x4[..., : dim // 2]), dim=-1)
    return (x4 * c + half * n).reshape(b, s, width)


def none(g: Any) -> Any:
    """An omitted optional input (the exporter writes its name as "")."""
    import torch

    node = g.op("prim::Constant")
    node.setType(torch._C.OptionalType.ofTensor())
    return node


def _int32(g: Any, value: Any) -> Any:
    return g.op("Cast", value, to_i=6)  # onnx.TensorProto.INT32


def _dim(g: Any, value: Any, axis: int) -> Any:
    """Shape(value)[axis], a 1-element int64 tensor."""
    index = g.op("Constant", value_t=_long([axis]))
    return g.op("Gather", g.op("Shape", value), index, axis_i=0)


def _width(value: Any, width: int) -> Any:
    """value's type with its last dimension `width` (the packed query's output)."""
    sizes = value.type().varyingSizes()
    return value.type().with_sizes([*sizes[:-1], width])


def _long(values: list[int]) -> Any:
    import torch

    return torch.tensor(values, dtype=torch.long)


def _function() -> Any:
    """The autograd.Function, made on first use (torch is imported lazily). Its forward
    is what the trace computes (transformers' rotary, then grouped attention); its
    symbolic is the one GroupQueryAttention node the graph gets. `k` and `v` are None
    when `q` is the packed [q | k | v] projection."""
    import torch

    class Attention(torch.autograd.Function):
        @staticmethod
        def forward(
            ctx: Any,
            q: Any,
            k: Any,
            v: Any,
            past_k: Any,
            past_v: Any,
            bias: Any,
            positions: Any,
            cos: Any,
            sin: Any,
            heads: int,
            kv_heads: int,
            dim: int,
            scale: float,
        ) -> tuple[Any, Any, Any]:
            from builders.causal_lm._attention import grouped_attention

            b, s, _ = q.shape
            if k is None:  # packed: [q | k | v] along the last axis
                q, k, v = q.split([heads * dim, kv_heads * dim, kv_heads * dim], dim=-1)
            q, k = _rotate(q, positions, cos, sin), _rotate(k, positions, cos, sin)
            key = torch.cat([past_k, k.view(b, s, kv_heads, dim).transpose(1, 2)], dim=2)
            value = torch.cat([past_v, v.view(b, s, kv_heads, -1).transpose(1, 2)], dim=2)
            query = q.view(b, s, heads, dim).transpose(1, 2)
            total = key.shape[2]  # query row i sits at position total - s + i
            rows = torch.arange(s, device=q.device)[:, None] + (total - s)
            late = torch.arange(total, device=q.device)[None, :] > rows
            bias = bias.masked_fill(late, torch.finfo(torch.float32).min)
            out, _ = grouped_attention(None, query, key, value, bias, scale)
            return out.reshape(b, s, -1), key, value

        @staticmethod
        def symbolic(
            g: Any,
            q: Any,
            k: Any,
            v: Any,
            past_k: Any,
            past_v: Any,
            bias: Any,
            positions: Any,
            cos: Any,
            sin: Any,
            heads: int,
            kv_heads: int,
            dim: int,
            scale: float,
        ) -> tuple[Any, Any, Any]:
            batch, seq, total = _dim(g, bias, 0), _dim(g, bias, 2), _dim(g, bias, 3)
            one = g.op("Constant", value_t=_long([1]))
            seqlens_k = _int32(g, g.op("Expand", g.op("Sub", total, one), batch))
            query_seqlens = _int32(g, g.op("Expand", seq, batch))
            total_length = _int32(g, g.op("Squeeze", total))
            later = [none(g) for _ in range(5)]  # head_sink, k/v_scale, q/k_norm_weight
            out, key, value = g.op(
                "com.microsoft::GroupQueryAttention",
                q,
                none(g) if k is None else k,
                none(g) if v is None else v,
                past_k,
                past_v,
                seqlens_k,
                total_length,
                cos,
                sin,
                positions,
                bias,
                *later,
                query_seqlens,
                num_heads_i=heads,
                kv_num_heads_i=kv_heads,
                scale_f=scale,
                do_rotary_i=1,
                rotary_interleaved_i=0,
                outputs=3,
            )
            out.setType(q.type() if k is not None else _width(q, heads * dim))
            key.setType(past_k.type())
            value.setType(past_v.type())
            return out, key, value

    return Attention


def _padding_bias(mask: Any, seq: int) -> Any:
    """[batch, 1, seq, total] additive bias from the graph's [batch, total] attention
    mask: 0 where a key is a real token, the dtype's minimum where it is padding (as
    transformers' own masks write it). Causality is GroupQueryAttention's own."""
    import torch

    low = torch.finfo(torch.float32).min
    bias = (1.0 - mask.to(torch.float32))[:, None, None, :] * low
    return bias.expand(-1, -1, seq, -1)


def _forward(attention: Any, cos: Any, sin: Any, seen: dict[str, Any]) -> Any:
    """A Llama attention forward over the fused op; the layer's cache entry becomes
    GroupQueryAttention's present key and value. The bias is the padding of the graph's
    own 2-D attention mask (`seen`, from the model's pre-hook), not transformers' 4-D
    mask, which reads the past's length from the cache tensors' shape: so nothing in
    the graph depends on the past's length but GroupQueryAttention, and a runtime may
    bind past and present to one buffer longer than the cache (onnxruntime's
    past-present buffer sharing, runtime/backends.py)."""

    def forward(
        self: Any,
        hidden_states: Any,
        position_embeddings: Any = None,
        attention_mask: Any = None,
        cache: Any = None,
        **kwargs: Any,
    ) -> tuple[Any, None]:
        layer = cache.layers[self.layer_idx]
        whole = packed(self, QKV)
        if whole is not None:
            q, k, v = whole(hidden_states), None, None
        else:
            q = self.q_proj(hidden_states)
            k, v = self.k_proj(hidden_states), self.v_proj(hidden_states)
        out, layer.keys, layer.values = attention.apply(
            q,
            k,
            v,
            layer.keys,
            layer.values,
            _padding_bias(seen["mask"], hidden_states.shape[1]),
            kwargs["position_ids"],
            cos,
            sin,
            self.config.num_attention_heads,
            self.config.num_key_value_heads,
            int(self.head_dim),
            float(self.scaling),
        )
        return self.o_proj(out), None

    return forward


@contextlib.contextmanager
def fused(model: Any, device: Any) -> Iterator[Fused]:
    """Within the block, each standard Llama attention layer of `model` runs the fused
    ops; yields what was fused (or why nothing was)."""
    done = Fused()
    why = supported()
    tables = why or _tables(model, device)
    if isinstance(tables, str):
        done.why_not = tables
        yield done
        return
    seen: dict[str, Any] = {}
    forward = _forward(_function(), *tables, seen)
    layers = [m for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "q_proj")]
    reasons = {_why_not_layer(m) for m in layers}
    if not layers or reasons != {""}:
        done.why_not = "; ".join(sorted(r for r in reasons if r)) or "no attention layers"
        yield done
        return

    def keep_mask(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen["mask"] = kwargs["attention_mask"]

    hook = model.register_forward_pre_hook(keep_mask, with_kwargs=True)
    for m in layers:
        m.forward = forward.__get__(m)
        done.layers.append(m.layer_idx)
    done.packed = all(packed(m, QKV) is not None for m in layers)
    try:
        yield done
    finally:
        hook.remove()
        for m in layers:
            del m.forward
