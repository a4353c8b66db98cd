"""Loading a checkpoint with transformers, the one way every builder does it.

fp32, eager attention (the reference semantics, and what traces cleanly), and
safetensors only: pickle-based weights can execute code when loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_causal_lm(checkpoint: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager", use_safetensors=True
    )
    return model.eval()


def cache_keyword(model: Any) -> str:
    """transformers 5.24 calls the cache `cache`; earlier 5.x releases (5.17 on the GPU
    host) `past_key_values`. A wrong keyword is swallowed by **kwargs and the exporter
    then drops the unused past inputs, so ask the signature."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def explicit_cache_module(model: Any) -> Any:
    """The model as (input_ids, attention_mask, position_ids, *past) -> (logits, *present),
    the KV-cache contract of builders/export.py; export and the aoti backend trace it."""
    import torch
    from transformers import DynamicCache

    layers = model.config.num_hidden_layers
    cache_kw = cache_keyword(model)

    class WithExplicitCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any
        ) -> Any:
            cache = DynamicCache(config=model.config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                use_cache=True,
                **{cache_kw: cache},
            )
            present = [
                t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)
            ]
            return (out.logits, *present)

    return WithExplicitCache().eval()


def example_inputs(config: Any, device: str = "cpu") -> tuple[Any, ...]:
    """Batch 2, 4 new tokens after 3 cached ones. Batch 1 would specialize the batch
    dimension to a constant in both exporters (FIELD_NOTES)."""
    import torch

    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", heads)
    batch, past_len, seq = 2, 3, 4
    return (
        torch.ones(batch, seq, dtype=torch.long, device=device),
        torch.ones(batch, past_len + seq, dtype=torch.long, device=device),
        torch.arange(past_len, past_len + seq, device=device).expand(batch, seq).contiguous(),
        *[
            torch.zeros(batch, kv_heads, past_len, head_dim, device=device)
            for _ in range(2 * config.num_hidden_layers)
        ],
    )


def restore_quantized(model: Any, artifact: Any) -> Any:
    """Put modelopt's calibrated quantizers (the quantize step's mto.save) on the model."""
    import modelopt.torch.opt as mto

    return mto.restore(model, str(artifact / "quantized.pt")).eval()
