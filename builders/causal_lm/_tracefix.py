"""Exact rewrites of transformers functions the legacy ONNX exporter cannot trace.

Each replacement computes bit-identical values (a permutation and a negation, no
arithmetic), and validate checks the exported graph against the unpatched fp32
reference, so a rewrite that changed a number would fail its gate.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

# Cohere's interleaved rotate_half is torch.stack([-x2, x1], -1) over strided slices
# x[..., ::2], x[..., 1::2]; the TorchScript exporter loses the slices' rank there
# and fails with "All tensors must have the same rank" (measured: Cohere2, 5.24).
_ROTATE_HALF_INTERLEAVED = (
    "transformers.models.cohere.modeling_cohere",
    "transformers.models.cohere2.modeling_cohere2",
)


def _rotate_half_interleaved(x: Any) -> Any:
    import torch

    pairs = x.unflatten(-1, (-1, 2))  # [..., d/2, (even, odd)]
    return torch.cat([-pairs[..., 1:2], pairs[..., 0:1]], dim=-1).flatten(-2)


def _rope_interleaved_forward(self: Any, x: Any, position_ids: Any) -> Any:
    """Cohere's rotary embedding with repeat_interleave(freqs, 2, -1) written as a
    stack: the exporter's repeat_interleave symbolic fails on a dynamic sequence
    length with the same "same rank" error. Otherwise transformers' code verbatim
    (default rope type only; `_rotary_class` checks that)."""
    import torch

    freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
    emb = torch.stack([freqs, freqs], dim=-1).flatten(-2)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def _rotary_class(module: Any, model: Any) -> Any:
    for sub in model.modules():
        if type(sub).__name__.endswith("RotaryEmbedding") and sub.rope_type == "default":
            return type(sub)
    return None


@contextlib.contextmanager
def traceable(model: Any) -> Iterator[None]:
    """Swap in the traceable rewrites for the model's modules while exporting."""
    module_name = type(model).__module__
    saved = []
    if module_name in _ROTATE_HALF_INTERLEAVED:
        module: Any = importlib.import_module(module_name)
        saved.append((module, "rotate_half", module.rotate_half))
        module.rotate_half = _rotate_half_interleaved
        rotary = _rotary_class(module, model)
        if rotary is not None:
            saved.append((rotary, "forward", rotary.forward))
            rotary.forward = _rope_interleaved_forward
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)
