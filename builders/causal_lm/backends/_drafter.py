"""inductor's drafting engine (dflash, dspark; issue 39): the target's programs also
return the hidden states the drafter reads, and the drafter is two more programs in
the same engine.zip, over the same static-shape contract, compiled and carried with
the target's (backends/_kernels.py), its weights in the same weights.safetensors
under "drafter.".

The capture points are the onnxruntime export's (builders/causal_lm/_capture.py: the
drafter config's target_layer_ids, "output of layer L" = pre:L+1), concatenated in
their order: each target program returns (logits, hidden [B, T, k * target width]).
The drafter's modules are the onnxruntime export's too (builders/causal_lm/_drafters.py,
loaded by drafter.block_modules); only the cache differs:

  draft.pt2   (weights..., context [1, C, W], context_positions [1, C], context_slots [C],
              block_ids [1, S], block_positions [1, S], visible [1, L + S], *cache)
              -> logits [1, S, V] fp32, hidden [1, S, H]
              Each layer's context keys/values are written at context_slots of its cache
              [1, kv_heads, L, head_dim] in place; the block attends to the visible
              slots, both ways: the context before it and its own first slots (a block
              of fewer slots is the same block with the rest hidden, so a shorter
              proposal is what the onnxruntime drafter computes). C is the verify
              length (the most rows one round commits); a longer context (the prompt's)
              is written C rows a call (runtime/inductor_drafter.py).
  markov.pt2  (DSpark) (w1, w2, proj weight, proj bias, hidden [1, H], prev_ids [1])
              -> bias [1, V] fp32, confidence [1] fp32

Batch one (speculation decodes one prompt at a time), L the engine's max_seq_len.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request

# The drafter's programs in engine.zip (runtime/inductor.py loads them as the target's).
PROGRAMS = ("draft", "markov")
PREFIX = "drafter."  # its weights' names in weights.safetensors


def capture(request: Request, kind: str, model: Any) -> tuple[list[str], dict[str, Any]]:
    """The capture points `kind`'s drafter (input 'drafter') reads, and the dict the
    target's hooks fill with them on every forward (none for 'none')."""
    from builders.causal_lm._capture import capture_points, install_hooks

    if kind == "none":
        return [], {}
    drafter = _config(request)
    try:
        points = capture_points(kind, model.config.to_dict(), drafter)
    except ValueError as exc:
        raise request.error(str(exc), "check the drafter's target_layer_ids") from None
    return points, install_hooks(model, points)


def _config(request: Request) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(
        (request.inputs["drafter"] / "checkpoint" / "config.json").read_text()
    )
    return config


def modules(request: Request, kind: str, model: Any) -> tuple[Any, Any, int]:
    """The drafter's backbone, its Markov heads (DSpark) and the mask token id; DFlash
    shares the target's embedding and head (read off `model` before it is cast)."""
    from builders.causal_lm.drafter import block_modules, read_tensors

    state = read_tensors(request.inputs["drafter"] / "checkpoint")
    target = {}
    if kind == "dflash":
        target = {
            "model.embed_tokens.weight": model.get_input_embeddings().weight.detach(),
            "lm_head.weight": model.get_output_embeddings().weight.detach(),
        }
    tcfg = {"tie_word_embeddings": False}
    return block_modules(request, kind, _config(request), state, target, tcfg)


def programs(
    request: Request,
    backbone: Any,
    markov: Any,
    verify_len: int,
    kind: str,
    max_seq_len: int,
    device: str,
    dtype: Any,
) -> tuple[dict[str, bytes], list[str], list[Any], dict[str, Any]]:
    """draft.pt2 (and markov.pt2), the drafter's weight names and tensors, and
    program.json's "drafter"."""
    import torch

    # a DSpark block of k slots proposes k tokens; DFlash's first slot proposes none
    size = verify_len - 1 if kind == "dspark" else verify_len
    rows = verify_len
    static = _static(backbone).to(device=device, dtype=dtype).eval()
    named = list(static.named_parameters())
    names, weights = [n for n, _ in named], [p.detach() for _, p in named]
    width, hidden = backbone.fc.in_features, backbone.norm.weight.shape[0]
    attn = backbone.layers[0].self_attn
    cache = [[1, attn.kv_heads, max_seq_len, attn.dim]] * (2 * len(backbone.layers))
    kw = {"device": device, "dtype": torch.long}
    example = (
        *weights,
        torch.zeros(1, rows, width, dtype=dtype, device=device),
        torch.arange(rows, **kw)[None],
        torch.arange(rows, **kw),
        torch.zeros(1, size, **kw),
        torch.arange(rows, rows + size, **kw)[None],
        torch.ones(1, max_seq_len + size, **kw),
        *[torch.zeros(shape, dtype=dtype, device=device) for shape in cache],
    )
    request.log(f"torch.export of the {kind} drafter ({rows} context rows, block of {size})")
    files = {"draft.pt2": _export(_program(static, names), example)}
    meta: dict[str, Any] = {
        "kind": kind,
        "context": rows,
        "block": size,
        "width": width,
        "hidden": hidden,
        "cache": cache,
        "weights": {"draft": [PREFIX + n for n in names]},
    }
    if markov is not None:
        heads = _heads(markov).to(device=device, dtype=dtype).eval()
        named = list(heads.named_parameters())
        mine = [n for n, _ in named]
        tensors = [p.detach() for _, p in named]
        example = (
            *tensors,
            torch.zeros(1, hidden, dtype=dtype, device=device),
            torch.zeros(1, **kw),
        )
        files["markov.pt2"] = _export(_program(heads, mine), example)
        meta["weights"]["markov"] = [PREFIX + n for n in mine]
        names += mine
        weights += tensors
    return files, [PREFIX + n for n in names], weights, meta


def _export(module: Any, example: tuple[Any, ...]) -> bytes:
    import torch

    with torch.no_grad():
        program = torch.export.export(module, example, strict=False)
    program._example_inputs = None  # save would store them: the weights again
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def _program(module: Any, names: list[str]) -> Any:
    """`module` as a program whose first inputs are its weights (as the target's
    programs take theirs: one copy in memory, passed to every call)."""
    import torch

    count = len(names)

    class Program(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            object.__setattr__(self, "inner", module)  # not lifted into the state_dict

        def forward(self, *args: Any) -> Any:
            params = dict(zip(names, args[:count], strict=True))
            return torch.func.functional_call(self.inner, params, args[count:])

    return Program().eval()


def _static(backbone: Any) -> Any:
    """The backbone (builders/causal_lm/_drafters.py Block) over a static context cache
    (the module docstring)."""
    import torch

    class Static(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = backbone

        def forward(
            self,
            context: Any,
            ctx_pos: Any,
            ctx_slots: Any,
            block_ids: Any,
            block_pos: Any,
            visible: Any,
            *cache: Any,
        ) -> Any:
            b = self.block
            ctx = b.hidden_norm(b.fc(context))
            x = b.embed(block_ids)
            low = torch.finfo(x.dtype).min
            bias = torch.where(visible.bool(), 0.0, low).to(x.dtype)[:, None, None, :]
            for i, layer in enumerate(b.layers):
                attn = layer.self_attn
                ck, cv = attn.keys_values(ctx, ctx_pos)
                cache[2 * i].index_copy_(2, ctx_slots, ck)
                cache[2 * i + 1].index_copy_(2, ctx_slots, cv)
                h = layer.input_layernorm(x)
                bk, bv = attn.keys_values(h, block_pos)
                k = torch.cat([cache[2 * i], bk], dim=2)
                v = torch.cat([cache[2 * i + 1], bv], dim=2)
                x = x + attn.attend(h, block_pos, k, v, bias)
                x = x + layer.mlp(layer.post_attention_layernorm(x))
            out = b.norm(x)
            return b.head(out).float(), out

    return Static()


def _heads(markov: Any) -> Any:
    """DSpark's Markov and confidence heads (Markov), their outputs in fp32."""
    import torch

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = markov

        def forward(self, hidden: Any, prev_ids: Any) -> Any:
            bias, confidence = self.heads(hidden, prev_ids)
            return bias.float(), confidence.float()

    return Heads()
