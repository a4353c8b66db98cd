"""Loading a checkpoint with transformers, the one way every builder does it.

fp32, eager attention (the reference semantics, and what traces cleanly), and
safetensors only: pickle-based weights can execute code when loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_causal_lm(checkpoint: Path) -> Any:
    """The checkpoint in fp32. MoE models get transformers' batched_mm experts, the only
    implementation that traces to ONNX (FIELD_NOTES); the math is the same."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    config = json.loads((checkpoint / "config.json").read_text())
    moe = any(k in config for k in ("n_routed_experts", "num_local_experts", "num_experts"))
    model = AutoModelForCausalLM.from_pretrained(
        checkpoint,
        dtype=torch.float32,
        attn_implementation="eager",
        use_safetensors=True,
        **({"experts_implementation": "batched_mm"} if moe else {}),
    )
    return model.eval()
