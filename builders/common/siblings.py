"""Sibling linear layers as one: a layer's q/k/v projections, an MLP's gate and up.

The siblings of a group read the same input, so one linear layer over their weights
side by side computes every output element as the same dot product, in one kernel.
Three places fuse them:

- the inductor backend, for its programs (builders/causal_lm/backends/inductor.py);
- the quantize step, before calibration, for int4-awq (FUSED_PRECISIONS), whose
  onnxruntime engine runs each linear layer as one MatMulNBits: AWQ then searches one
  input scale for the group, the way AWQ itself does (Lin et al. 2023, section 3.2:
  the scale of the linears that share an input is searched jointly, then folded into
  the op before them). That scale then folds into the RMSNorm that feeds the group
  (`fold_input_scales`), so the graph multiplies nothing at run time, and down_proj's
  into up's rows of the fused gate_up weight; only o_proj keeps its Mul. Per-linear
  scales left 241 activation Muls in SmolLM2's int4 decode step, 1.4 ms of 16.7
  (bench/probes/step_profile.py), and kept q, k and v as three MatMulNBits; 61 Muls are
  left, 30 of them AWQ's (o_proj).
  The joint scale costs some quality on SmolLM2 (log-perplexity ratio 0.058 per
  linear, 0.092 joint; next-token agreement 0.799 and 0.773; the gates ask <= 0.130
  and >= 0.739).
  SmolLM2's int4-awq decodes 5% faster fused (97.9 against 93.4 tokens/s, one
  bundle per process, one thread, 6 interleaved rounds: bench/probes/decode_ab.py).
  w4a8-awq keeps per-linear scales: its onnxruntime engine runs Q/DQ, with no fused
  kernel to gain, and joint scales took it past its perplexity gate (0.1305).
  int8-wo stays unfused too: fused, its 8-bit MatMulNBits decoded SmolLM2 slower
  (71 against 79 tokens/s, the two bundles in one process);
- the export step, which rebuilds the quantize step's structure before it restores
  the calibrated quantizers onto it (builders/common/hf.py restore_quantized).

Each group becomes a `torch.nn.Linear` (so modelopt quantizes it as any Linear),
registered under the group's name; the siblings' own names become `Slice`s of its
output. A Slice keeps the fused layer's last output for the input it was computed
from, so the group costs one product per input, also while modelopt calibrates.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

# Sibling linear layers a module applies to one input, and the name of their fusion.
FUSIONS = ((("q_proj", "k_proj", "v_proj"), "qkv_proj"), (("gate_proj", "up_proj"), "gate_up_proj"))
# recipe precisions calibrated on fused siblings (builders/causal_lm/quantize.py)
FUSED_PRECISIONS = ("int4-awq",)
# (norm, module, fused layer) of a Llama decoder layer: the norm's output feeds only it
NORMED = (
    ("input_layernorm", "self_attn", "qkv_proj"),
    ("post_attention_layernorm", "mlp", "gate_up_proj"),
)


def fuse(model: Any, special: Any = None) -> int:
    """Each group of FUSIONS found on a module, all plain `torch.nn.Linear` of one input
    width and bias (or all of the class `special`, which fuses them itself:
    `special.fuse(layers)`), becomes one layer over the concatenated weights. Returns
    the groups fused."""
    import torch

    kinds_ok = {torch.nn.Linear} | ({special} if special is not None else set())
    count = 0
    for module in list(model.modules()):
        for parts, name in FUSIONS:
            layers: list[Any] = [getattr(module, p, None) for p in parts]
            kinds = {type(x) for x in layers}
            if len(kinds) != 1 or not kinds <= kinds_ok:
                continue
            if len({(x.in_features, x.bias is None) for x in layers}) != 1:
                continue
            fused = special.fuse(layers) if kinds == {special} else _linear(layers)
            setattr(module, name, fused)
            start = 0
            for part, layer in zip(parts, layers, strict=True):
                setattr(module, part, _slice_class()(fused, start, start + layer.out_features))
                start += layer.out_features
            count += 1
    return count


def packed(module: Any, parts: tuple[str, ...]) -> Any:
    """The fused layer whose Slices `parts` of `module` are, in order and covering its
    whole output; None where they are not."""
    Slice = _slice_class()
    got: list[Any] = [getattr(module, p, None) for p in parts]
    if not all(isinstance(s, Slice) for s in got) or len({id(s.fused) for s in got}) != 1:
        return None
    fused = got[0].fused
    bounds = [0, *(s.stop for s in got)]
    starts = [s.start for s in got]
    whole = bounds[-1] == fused.weight.shape[0] and starts == bounds[:-1]
    return fused if whole else None


def fold_input_scales(model: Any) -> int:
    """AWQ's input scales (an input quantizer's pre_quant_scale, which the graph would
    multiply at run time) folded into the op before the layer, in each decoder layer
    that is Llama's (its forward, and RMSNorms whose forward is Llama's:
    `weight * normalized`, and an MLP whose forward is Llama's:
    `down(act(gate(x)) * up(x))`):

    - a fused layer reading a norm's output: into the norm's weight, as
      norm(x) * w * s == norm(x) * (w * s) up to fp32 rounding;
    - down_proj: into the rows of up_proj where up is a Slice of the fused gate_up
      layer, as act(g) * (u * s) == act(g) * u * s, with the fused layer's weight
      quantizer recalibrated on the scaled weight (modelopt's own max calibration, as
      AWQ itself recalibrates after scaling). Scaling a row by a positive s scales the
      amax of each block of that row by s, so its integers stay the same: exact where
      the weight quantizer's blocks lie along rows (block_sizes on the last axis, or
      per output channel), and not folded otherwise.

    The quantizer's scale is removed (modelopt's own delete path). Returns the layers
    folded."""
    import torch
    from transformers.models.llama import modeling_llama as llama

    folded = 0
    for layer in model.modules():
        if not same_source(type(layer).forward, llama.LlamaDecoderLayer.forward):
            continue
        for norm_name, owner, name in NORMED:
            norm: Any = getattr(layer, norm_name, None)
            linear = getattr(getattr(layer, owner, None), name, None)
            scale = _input_scale(linear)
            if scale is None or norm is None or not same_source(type(norm).forward, _rms_forward()):
                continue
            with torch.no_grad():
                norm.weight.mul_(scale.reshape(-1).to(norm.weight.dtype))
            _drop_input_scale(linear)
            folded += 1
        folded += _fold_down_scale(getattr(layer, "mlp", None))
    return folded


def _fold_down_scale(mlp: Any) -> int:
    """down_proj's input scale into up's rows of the fused gate_up layer (see
    fold_input_scales); 1 when folded, else 0."""
    import torch
    from modelopt.torch.quantization.model_calib import max_calibrate
    from transformers.models.llama import modeling_llama as llama

    if mlp is None or not same_source(type(mlp).forward, llama.LlamaMLP.forward):
        return 0
    scale = _input_scale(getattr(mlp, "down_proj", None))
    fused = packed(mlp, ("gate_proj", "up_proj"))
    quantizer: Any = getattr(fused, "weight_quantizer", None)
    if scale is None or fused is None or quantizer is None or not _rowwise(quantizer):
        return 0
    if fused.bias is not None or mlp.up_proj.stop - mlp.up_proj.start != scale.numel():
        return 0
    rows = slice(mlp.up_proj.start, mlp.up_proj.stop)
    with torch.no_grad():
        fused.weight[rows].mul_(scale.reshape(-1, 1).to(fused.weight.dtype))
    quantizer.reset_amax()
    max_calibrate(fused, lambda m: m.weight_quantizer(m.weight))
    _drop_input_scale(mlp.down_proj)
    return 1


def _input_scale(linear: Any) -> Any:
    quantizer: Any = getattr(linear, "input_quantizer", None)
    return getattr(quantizer, "pre_quant_scale", None)


def _drop_input_scale(linear: Any) -> None:
    quantizer = linear.input_quantizer
    delattr(quantizer, "_pre_quant_scale")
    quantizer._enable_pre_quant_scale = False


def _rowwise(quantizer: Any) -> bool:
    """Whether each of the weight quantizer's amax covers part of one output row only:
    blocks along the input axis, or one amax per output channel."""
    blocks = getattr(quantizer, "block_sizes", None) or {}
    if blocks:
        along = {k for k in blocks if isinstance(k, int)}
        return along in ({-1}, {1}) and blocks.get("type", "static") == "static"
    return getattr(quantizer, "axis", None) in (0, (0,))


@functools.cache
def _rms_forward() -> Any:
    from transformers.models.llama import modeling_llama as llama

    return llama.LlamaRMSNorm.forward


def same_source(mine: Any, llama: Any) -> bool:
    """Whether `mine` is `llama` or has its source, the function's own name aside (a
    subclass's copy of a transformers function, say): what the rewrites that assume
    Llama's arithmetic check first."""

    def body(f: Any) -> str:
        return inspect.getsource(f).replace(f.__name__, "_", 1)

    try:
        return mine is llama or body(mine) == body(llama)
    except (OSError, TypeError):
        return False


def _linear(layers: list[Any]) -> Any:
    """A torch.nn.Linear over the layers' weights (and biases) side by side."""
    import torch

    out = sum(x.out_features for x in layers)
    bias = layers[0].bias is not None
    fused = torch.nn.utils.skip_init(
        torch.nn.Linear,
        layers[0].in_features,
        out,
        bias=bias,
        dtype=layers[0].weight.dtype,
        device=layers[0].weight.device,
    )
    with torch.no_grad():
        fused.weight.copy_(torch.cat([x.weight for x in layers]))
        if bias:
            fused.bias.copy_(torch.cat([x.bias for x in layers]))
    return fused.requires_grad_(False)


@functools.cache
def _slice_class() -> Any:
    import torch

    class Slice(torch.nn.Module):
        """A part of a fused layer: its columns of the fused output. The layer's last
        output is kept on it for the input it was computed from, so the parts' slices
        of one input cost one product in all."""

        def __init__(self, fused: Any, start: int, stop: int) -> None:
            super().__init__()
            object.__setattr__(self, "fused", fused)  # not a submodule: named once
            self.start, self.stop = start, stop

        def forward(self, x: Any) -> Any:
            fused = self.fused
            last = getattr(fused, "last", None)
            if last is None or last[0] is not x:  # `is`: the very tensor object
                last = (x, fused(x))
                object.__setattr__(fused, "last", last)
            return last[1][..., self.start : self.stop]

    return Slice
