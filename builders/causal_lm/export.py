"""export: load the checkpoint with transformers and write ONNX with an explicit KV cache.

The graph's contract, which the runtime relies on:

    inputs   input_ids [batch, seq] int64
             attention_mask [batch, past + seq] int64     (1 = real token, 0 = padding)
             position_ids [batch, seq] int64            ([batch, seq, 3] where the decoder
                                                         rotates by M-RoPE: (t, h, w) last)
             past.<layer>.key / past.<layer>.value [batch, heads, past, dim]
             logits_to_keep [] int64                    (0: every position)
             image_features [rows, hidden] float32      (image-text-to-text only: the
                                                         vision program's rows, written
                                                         at the image tokens in order)
             deepstack_features [rows, levels, hidden]  (DeepStack decoders only,
                                                         Qwen3-VL: added at the image
                                                         tokens after layers 0..levels-1)
    outputs  logits [batch, seq, vocab]              (the last logits_to_keep positions
                                                      when it is > 0)
             present.<layer>.key / present.<layer>.value [batch, heads, past + seq, dim]

logits_to_keep is transformers' own argument of that name (0 keeps every position): a
generation's prefill needs the last position's logits only, and over SmolLM2's
49,152-word vocabulary the output projection of a 400-token prompt is about a fifth of
the prefill's work. It is a required input, not one with a default: onnxruntime's
IOBinding, which the runtime's in-place cache runs through, cannot bind an input that
has a default. A graph whose model takes no such argument has no such input
(export.json `logits_to_keep`).

heads and dim are observed per layer and per tensor from one forward pass
(builders/causal_lm/_cache.py) and recorded in export.json's kv_cache.entries; MLA models
cache keys and values of different widths.

A vision-language model's decoder reads its token embeddings with image_features
written over the rows of its image tokens (merge_image_features): the k-th image token
of the batch, counted row by row, takes feature row k. A forward that feeds no image
token passes image_features of 0 rows. Where the model's mask lets an image's tokens
see each other both ways (Gemma 3), the graph builds that mask from input_ids, as the
processor's token_type_ids give it (export.json image_attention "bidirectional").
Where the decoder's rotary takes 3-D positions (Qwen2.5-VL's M-RoPE, mrope_section),
position_ids carries the (t, h, w) triple on its last axis, which the graph moves first
as transformers takes it ((3, batch, seq)); the runtime computes the triples
(runtime/mrope.py) and every slice it makes along seq stays the 1-D one (export.json
position_axes 3).

A DeepStack decoder (Qwen3-VL) also takes the rows its vision tower's intermediate
mergers made, one set per level: transformers adds level l's rows to the hidden states
at the image tokens after decoder layer l (Qwen3VLTextModel._deepstack_process). The
graph picks each image token's rows as merge_image_features picks its features (the
k-th image token of the batch takes row k; text tokens, and image tokens past the rows,
take zeros) and adds them after those layers by forward hooks (deepstack_hooks): the
same one addition per image row, and + 0 elsewhere, which leaves a text row's bits as
they are, so a forward of no image rows (a text chunk, a decode step) is the model's
own text path (export.json deepstack_levels). A model without DeepStack traces the
graph it always did.

A prefill passes past tensors with past = 0. The example batch is 2 and the example
past is non-empty: with batch 1 the exporter specializes the batch dimension to a
constant (FIELD_NOTES). The legacy TorchScript exporter is used: it is 10-20x
faster than dynamo for these graphs and is the one that handles fake-quantized
models later on.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")
    task: str = Field(
        "text-generation",
        pattern="^(text-generation|image-text-to-text)$",
        description="The task; image-text-to-text also takes image_features.",
    )
    hidden: str = Field(
        "none",
        pattern="^(none|mtp|eagle3|dflash|dspark)$",
        description="Also output the hidden states this drafter reads, as output 'hidden' "
        "(builders/causal_lm/_capture.py); 'none' keeps the ordinary graph.",
    )
    attention: str = Field(
        "standard",
        pattern="^(standard|onnxruntime)$",
        description="'onnxruntime': standard Llama attention layers as onnxruntime's fused "
        "GroupQueryAttention, rotary included (builders/causal_lm/_ort_attention.py), for "
        "an onnxruntime CPU engine; 'standard': ONNX's own ops, for any engine.",
    )


def _capture(request: Request, opts: Options, model: Any) -> list[str]:
    """The capture points of opts.hidden, from the drafter's config (input 'drafter')."""
    import json

    from builders.causal_lm._capture import capture_points

    if opts.hidden == "none":
        return []
    drafter: dict[str, Any] = {}
    if "drafter" in request.inputs:
        drafter = json.loads((request.inputs["drafter"] / "checkpoint" / "config.json").read_text())
    try:
        return capture_points(opts.hidden, model.config.to_dict(), drafter)
    except ValueError as exc:
        raise request.error(str(exc), "fix the drafter checkpoint's layer ids") from None


KEEP = "logits_to_keep"
IMAGES = "image_features"
DEEPSTACK = "deepstack_features"


def io_names(
    entries: list[dict[str, Any]], keep: bool = False, images: bool = False, deep: bool = False
) -> tuple[list[str], list[str]]:
    inputs = ["input_ids", "attention_mask", "position_ids"] + [e["past"] for e in entries]
    inputs += [KEEP] if keep else []
    inputs += [IMAGES] if images else []
    inputs += [DEEPSTACK] if deep else []
    outputs = ["logits"] + [e["present"] for e in entries]
    return inputs, outputs


def explicit_cache_module(
    model: Any,
    entries: list[dict[str, Any]],
    seen: dict[str, Any] | None = None,
    points: list[str] | None = None,
    keep: bool = False,
    image_token: int | None = None,
    mrope: bool = False,
    levels: int = 0,
) -> Any:
    """The model as (input_ids, attention_mask, position_ids, *past) -> (logits, *present):
    the contract above. The aoti backend traces the same module. With `points`, the
    hidden states a drafter needs (captured by hooks into `seen`) are one more output;
    with `keep`, logits_to_keep is one more input, after the past; with `image_token`,
    image_features is the last input, merged at that token's rows; with `mrope`,
    position_ids is [batch, seq, 3]; with `levels`, deepstack_features is the last
    input, after image_features, added after the first `levels` decoder layers."""
    import torch

    from builders.causal_lm import _cache
    from builders.common.hf import cache_keyword

    cache_kw = cache_keyword(model)
    blocks = image_token is not None and bidirectional_images(model)
    window = getattr(model.config.get_text_config(decoder=True), "sliding_window", None)
    added: dict[int, Any] = {}  # a forward's DeepStack rows by layer, which the hooks add
    if levels:
        deepstack_hooks(model, levels, added)

    class WithExplicitCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any
        ) -> Any:
            kept: dict[str, Any] = {}
            tokens: dict[str, Any] = {"input_ids": input_ids}
            if levels and image_token is not None:
                *past, deep = past  # type: ignore[assignment]
                added.update(enumerate(deepstack_rows(input_ids, deep, image_token)))
            if image_token is not None:
                *past, features = past  # type: ignore[assignment]
                embeds = self.model.get_input_embeddings()(input_ids)
                merged = merge_image_features(input_ids, embeds, features, image_token)
                tokens = {"inputs_embeds": merged}
            if keep:
                *past, last = past  # type: ignore[assignment]
                kept = {KEEP: kept_positions(input_ids, last)}
            if mrope:  # [batch, seq, (t, h, w)] -> transformers' (3, batch, seq)
                position_ids = position_ids.permute(2, 0, 1)
            if blocks and image_token is not None:  # Gemma 3: image tokens see each other
                attention_mask = image_block_masks(
                    input_ids, attention_mask, image_token, window, merged.dtype
                )
            out = self.model(
                **tokens,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_kw: _cache.full_cache(past, entries)},
                **kept,
            )
            present = [
                t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)
            ]
            hidden = [torch.cat([seen[p] for p in points], dim=-1)] if seen and points else []
            return (out.logits, *present, *hidden)

    return WithExplicitCache().eval()


def merge_image_features(input_ids: Any, embeds: Any, features: Any, token: int) -> Any:
    """Token embeddings [batch, seq, hidden] with the k-th `token` of the batch (row
    by row) replaced by features[k - 1]: a cumulative count indexes a table whose row
    0 is zeros, so text tokens (index 0) and a forward of no image rows trace the same
    graph, and Where keeps the text rows' own embeddings. An image token past the
    features (one a decode step generated) keeps its own embedding, as transformers
    embeds an image token that comes without pixels."""
    import torch

    is_image = input_ids == token
    count = torch.cumsum(is_image.reshape(-1).to(torch.int64), 0)
    # the TorchScript tracer keeps a shape as a tensor (dynamic rows); torch.export, whose
    # programs have static shapes (the inductor backend's prefill), takes the int
    rows = torch._shape_as_tensor(features)[0] if torch.jit.is_tracing() else features.shape[0]
    fed = is_image.reshape(-1) & (count <= rows)
    index = count * fed.to(torch.int64)
    table = torch.cat([features.new_zeros(1, features.shape[-1]), features], 0)
    picked = table[index].reshape(embeds.shape)
    return torch.where(fed.reshape(is_image.shape).unsqueeze(-1), picked, embeds)


def deepstack_rows(input_ids: Any, deep: Any, token: int) -> list[Any]:
    """Per DeepStack level, [batch, seq, hidden]: the k-th `token` of the batch (row by
    row) takes deep[k - 1, level], as merge_image_features picks features; every other
    position zeros."""
    import torch

    is_image = input_ids == token
    count = torch.cumsum(is_image.reshape(-1).to(torch.int64), 0)
    rows = torch._shape_as_tensor(deep)[0] if torch.jit.is_tracing() else deep.shape[0]
    fed = is_image.reshape(-1) & (count <= rows)
    index = count * fed.to(torch.int64)
    table = torch.cat([deep.new_zeros(1, *deep.shape[1:]), deep], 0)
    picked = table[index]  # [batch * seq, levels, hidden]; row 0: zeros
    shape = (*input_ids.shape, deep.shape[-1])
    return [picked[:, level].reshape(shape) for level in range(deep.shape[1])]


def deepstack_hooks(model: Any, levels: int, added: dict[int, Any]) -> None:
    """Forward hooks that add added[l] to decoder layer l's output, l < levels (the
    layers transformers' _deepstack_process follows)."""
    layers = model.model.language_model.layers

    def hook(layer: int) -> Any:
        def add(module: Any, args: Any, out: Any) -> Any:
            return out + added[layer] if layer in added else out

        return add

    for layer in range(min(levels, len(layers))):
        layers[layer].register_forward_hook(hook(layer))


def deepstack_levels(model: Any) -> int:
    """The DeepStack levels a vision-language decoder adds (Qwen3-VL's
    deepstack_visual_indexes; 0 for every other model)."""
    vision = getattr(model.config, "vision_config", None)
    return len(getattr(vision, "deepstack_visual_indexes", None) or ())


def bidirectional_images(model: Any) -> bool:
    """Whether the model's own mask lets an image's tokens attend to each other in both
    directions (Gemma 3 and PaliGemma take token_type_ids for that; 1 marks an image
    token). The graph finds the images in input_ids (image_block_masks), so its mask is
    the model's over the tokens one forward feeds: a prefill chunk must hold an image's
    tokens whole, which the runtime keeps (bundle.json vision.image_attention,
    runtime/causal_lm.py)."""
    import inspect

    return "token_type_ids" in inspect.signature(model.forward).parameters


def image_block_masks(
    input_ids: Any, attention_mask: Any, token: int, window: int | None, dtype: Any
) -> dict[str, Any]:
    """Gemma 3's attention masks for one forward, additive [batch, 1, seq, past + seq],
    per layer type, as its processor's token_type_ids make them in transformers
    (create_masks_for_vision_model): a key is visible when it is real (attention_mask)
    and not after the query, or when query and key are tokens of one image (a run of
    `token` in this forward); a sliding layer also drops keys `window` or more
    positions back. Written here because transformers builds the image-block overlay
    under torch.vmap, which the TorchScript exporter cannot trace; the model reads a
    ready mapping as it is (validate compares the graph with transformers' own)."""
    import torch

    seq = torch._shape_as_tensor(input_ids)[1]
    total = torch._shape_as_tensor(attention_mask)[1]
    past = total - seq
    query = torch.cumsum(torch.ones_like(input_ids[0]), 0) - 1 + past  # absolute positions
    key = torch.cumsum(torch.ones_like(attention_mask[0]), 0) - 1
    is_image = input_ids == token
    before = torch.cat([torch.zeros_like(is_image[:, :1]), is_image[:, :-1]], 1)
    group = torch.cumsum((is_image & ~before).to(torch.int64), 1) - 1
    block = torch.where(is_image, group, torch.full_like(group, -1))  # -1: not an image
    at = torch.clamp(key - past, min=0).unsqueeze(0).expand(block.shape[0], -1)
    key_block = torch.where((key >= past).unsqueeze(0), block.gather(1, at), -1)
    same = (block[:, :, None] == key_block[:, None, :]) & (block[:, :, None] >= 0)
    causal = key[None, None, :] <= query[None, :, None]
    real = attention_mask[:, None, :].to(torch.bool)
    visible = (causal | same) & real
    low = torch.finfo(dtype).min

    def additive(ok: Any) -> Any:
        zero = torch.zeros((), dtype=dtype)
        return torch.where(ok, zero, torch.full((), low, dtype=dtype)).unsqueeze(1)

    masks = {"full_attention": additive(visible)}
    if window is not None:
        near = (query[:, None] - key[None, :]) < window
        masks["sliding_attention"] = additive(visible & near[None])
    return masks


def mrope_positions(model: Any) -> bool:
    """Whether the decoder's rotary takes (t, h, w) positions (M-RoPE: Qwen2-VL's
    family names its sections mrope_section)."""
    text = model.config.get_text_config(decoder=True)
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {}
    return "mrope_section" in rope


def image_token_id(model: Any) -> int | None:
    """The image token a vision-language model's decoder merges features at."""
    found = getattr(model.config, "image_token_id", None)
    return int(found) if found is not None else None


def kept_positions(input_ids: Any, keep: Any) -> Any:
    """The positions [seq - keep, seq) as a 1-D tensor (every position when keep is 0,
    or more than seq), which transformers' logits_to_keep takes as indices."""
    import torch

    seq = torch._shape_as_tensor(input_ids)[1]
    start = torch.where(keep > 0, torch.clamp(seq - keep, min=0), torch.zeros_like(keep))
    return torch.arange(start, seq, device=input_ids.device)


def keeps_logits(model: Any) -> bool:
    """Whether the model's forward takes transformers' logits_to_keep."""
    import inspect

    return KEEP in inspect.signature(model.forward).parameters


def example_inputs(entries: list[dict[str, Any]], device: str = "cpu") -> tuple[Any, ...]:
    """Batch 2, 4 new tokens after 3 cached ones (batch 1 would specialize the batch
    dimension to a constant, FIELD_NOTES)."""
    import torch

    from builders.causal_lm import _cache

    batch, past_len, seq = 2, 3, 4
    example = (
        torch.ones(batch, seq, dtype=torch.long),
        torch.ones(batch, past_len + seq, dtype=torch.long),
        torch.arange(past_len, past_len + seq).expand(batch, seq).contiguous(),
        *_cache.example(entries, batch, past_len),
    )
    return tuple(t.to(device) for t in example)


def _needs_cuda(request: Request) -> bool:
    """NVFP4's fake-quant kernels run on CUDA only (builders/causal_lm/quantize.py)."""
    quantized = request.inputs.get("quantized")
    if quantized is None:
        return False
    return bool(json.loads((quantized / "quantize.json").read_text())["weights"] == "nvfp4")


def build(request: Request, writer: Writer) -> None:
    import torch

    from builders.causal_lm import _attention, _cache, _ort_attention, _tracefix
    from builders.causal_lm._capture import install_hooks
    from builders.common.hf import auto_class, load_for_export

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    model = load_for_export(checkpoint, auto_class(opts.task))
    image_token = image_token_id(model) if opts.task == "image-text-to-text" else None
    if "adapter" in request.inputs:  # a LoRA companion is merged here, at export
        from builders.causal_lm._adapter import with_adapter

        model = with_adapter(request, model, merge=True)
    entries = _cache.observe(request, model)
    points = _capture(request, opts, model)
    seen = install_hooks(model, points) if points else {}
    if "quantized" in request.inputs:
        from builders.common.hf import restore_quantized

        model = restore_quantized(model, request.inputs["quantized"])
    device = "cuda" if _needs_cuda(request) else "cpu"
    model.to(device)
    keep = keeps_logits(model)
    example = example_inputs(entries, device)
    mrope = image_token is not None and mrope_positions(model)
    if mrope:  # the same position on all three axes: text tokens' (runtime/mrope.py)
        example = (
            *example[:2],
            example[2].unsqueeze(-1).expand(-1, -1, 3).contiguous(),
            *example[3:],
        )
    example += (torch.tensor(0, device=device),) if keep else ()
    hidden_size = model.config.get_text_config(decoder=True).hidden_size
    example += (torch.zeros(3, hidden_size, device=device),) if image_token is not None else ()
    levels = deepstack_levels(model) if image_token is not None else 0
    example += (torch.zeros(3, levels, hidden_size, device=device),) if levels else ()
    inputs, outputs = io_names(entries, keep, image_token is not None, levels > 0)
    outputs += ["hidden"] if points else []
    dynamic = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
        **{e["past"]: {0: "batch", _cache.SEQ_AXIS: "past"} for e in entries},
        **{
            name: {0: "batch", _cache.SEQ_AXIS: "total"} for name in outputs[1:] if name != "hidden"
        },
        **({"hidden": {0: "batch", 1: "seq"}} if points else {}),
        **({IMAGES: {0: "rows"}} if image_token is not None else {}),
        **({DEEPSTACK: {0: "rows"}} if levels else {}),
    }
    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    request.log(f"exporting {type(model).__name__} ({layers} layers) to ONNX opset {opts.opset}")
    # The tracer warns about the cache's Python-side bookkeeping (empty-cache checks,
    # padding arithmetic) being frozen into the trace. Those branches are the same
    # for every shape the runtime feeds, and validate checks the graph against the
    # reference at many shapes, so the warnings are noise here.
    # onnxruntime's fused attention rotates by one position per token, not M-RoPE's three
    fuse = opts.attention == "onnxruntime" and not mrope
    with (
        torch.no_grad(),
        warnings.catch_warnings(),
        _tracefix.traceable(model),
        _ort_attention.fused(model, device) if fuse else contextlib.nullcontext() as fused,
        _attention.grouped(model) as swapped,
    ):
        warnings.simplefilter("ignore")
        attention = fused.summary() if fused else {"form": "standard", "layers": 0}
        if fused and fused.layers:
            request.log(
                f"attention: {len(fused.layers)} layers as onnxruntime's GroupQueryAttention "
                "(rotary included" + (", q/k/v packed)" if fused.packed else ")")
            )
        elif fused:
            request.log(f"attention: standard form ({fused.why_not})")
        if swapped and not (fused and fused.layers):
            request.log("attention: grouped queries over the shared KV heads (no repeat_kv)")
        try:
            torch.onnx.export(
                explicit_cache_module(
                    model, entries, seen, points, keep, image_token, mrope, levels
                ),
                example,
                str(writer.path("model.onnx")),
                input_names=inputs,
                output_names=outputs,
                dynamic_axes=dynamic,
                opset_version=opts.opset,
                dynamo=False,
            )
        except Exception as exc:
            if not _needs_cuda(request):
                raise
            # NVFP4: modelopt needs opset 23 for FP4 tensors (api_facts 2); the
            # TorchScript exporter, the only one that exports fake-quant models, stops at 20
            raise request.unsupported(
                f"the TorchScript exporter cannot write this NVFP4 graph at opset "
                f"{opts.opset}: {type(exc).__name__}: {str(exc)[:300]}"
            ) from None
    # a quantized or adapted model's weights are not the checkpoint's bytes
    plain = "quantized" not in request.inputs and "adapter" not in request.inputs
    folded, shared = external_weights(writer.path("model.onnx"), checkpoint if plain else None)
    if folded:
        request.log(f"fused sibling MatMuls: {folded} fewer")
    if shared:
        request.log(f"weights: {shared:,d} bytes read from the checkpoint's own file")
    meta = {**describe(model, entries), "hidden": points, "attention": attention}
    meta[KEEP] = keep
    if image_token is not None:
        meta["image_token_id"] = image_token
        meta["image_attention"] = "bidirectional" if bidirectional_images(model) else "causal"
        meta["position_axes"] = 3 if mrope else 1
        meta.update({"deepstack_levels": levels} if levels else {})
    if "quantized" in request.inputs:
        done = json.loads((request.inputs["quantized"] / "quantize.json").read_text())
        keys = ("weights", "kv_cache", "config", "device", "lm_head_outliers")
        meta["quantization"] = {k: done[k] for k in keys if k in done}
    writer.write_json("export.json", meta)


def external_weights(path: Any, checkpoint: Any = None) -> tuple[int, int]:
    """Rewrite the exported graph with its weights in one external-data file beside it
    (model.onnx.data): the exporter writes one protobuf, which cannot pass 2 GiB, or,
    past it, one file per tensor. Sibling MatMuls are fused on the way
    (builders/common/graph.py fuse_siblings), here rather than in the onnx step, so
    that the onnx step's tidy leaves the weights as they are.

    With the `checkpoint` folder (a model whose weights are its checkpoint's), each
    weight the exporter transposed is read as Transpose(the checkpoint's matrix) and
    every tensor that is checkpoint bytes is read from a copy of the checkpoint's
    safetensors file beside the graph, which the store keeps once
    (builders/common/weights.py). Returns (MatMuls folded away, bytes shared)."""
    import onnx
    import onnx_ir as ir

    from builders.common import graph, weights

    model = onnx.load(str(path), load_external_data=False)
    written = graph.external_files(model)  # past 2 GiB, the exporter's per-tensor files
    onnx.load_external_data_for_model(model, str(path.parent))
    for name in written:
        (path.parent / name).unlink()
    ir_model = ir.serde.deserialize_model(model)
    stored = weights.stored_layout(ir_model, checkpoint) if checkpoint is not None else {}
    folded = graph.fuse_siblings(ir_model, stored)
    graph.save(ir.serde.serialize_model(ir_model), path)
    if not stored:
        return folded, 0
    shared, _ = weights.share_data(path, weights.checkpoint_starts(checkpoint))
    return folded, shared


def describe(model: Any, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """export.json: what the runtime needs to know about the graph. `entries` is the
    cache contract per tensor; kv_heads/head_dim stay for readers of uniform caches."""
    shapes = {(e["shape"][1], e["shape"][3]) for e in entries}
    uniform = shapes.pop() if len(shapes) == 1 else (None, None)
    config = model.config
    return {
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "kv_cache": {
            "layers": len({e["layer"] for e in entries}),
            "kv_heads": uniform[0],
            "head_dim": uniform[1],
            "dtype": "float32",
            "layout": ["batch", "kv_heads", "seq", "head_dim"],
            "past": "past.{layer}.{kind}",
            "present": "present.{layer}.{kind}",
            "entries": entries,
        },
        "vocab_size": config.get_text_config(decoder=True).vocab_size,
        "max_position_embeddings": config.get_text_config(decoder=True).max_position_embeddings,
    }


def value_info(entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The I/O contract as onnx.py's io.json writes it, for engines built without ONNX."""
    inputs, _ = io_names(entries)
    ins = [{"name": n, "dtype": "int64", "shape": ["batch", "seq"]} for n in inputs[:3]]
    ins[1]["shape"] = ["batch", "total"]
    ins += [
        {"name": e["past"], "dtype": "float32", "shape": ["batch", "heads", "past", "dim"]}
        for e in entries
    ]
    outs = [{"name": "logits", "dtype": "float32", "shape": ["batch", "seq", "vocab"]}]
    outs += [
        {"name": e["present"], "dtype": "float32", "shape": ["batch", "heads", "total", "dim"]}
        for e in entries
    ]
    return {"inputs": ins, "outputs": outs}
