"""Gemma 4's MTP assistant (Gemma4AssistantForCausalLM) as one drafting step that traces
to ONNX: transformers' own modules, fed as transformers' generate feeds them
(generation/candidate_generator.py SinglePositionMultiTokenCandidateGenerator).

A step reads [target embedding of the last token, a hidden row] projected to the
assistant's width, at one constant position (the last token's), and every layer
attends to the target's keys and values instead of its own: those of the target's last
sliding and last global layer (Gemma4TextConfig.kv_sharing_modes "store"). It returns
logits and the row, projected back to the target's width, that the next step reads
in place of the target's hidden row. It has no cache of its own.

The masks are written here, not by Gemma4AssistantForCausalLM.create_attention_masks
(Python-side shape logic the tracer would freeze): every global key is visible, and a
sliding key j of L is visible iff L - 1 - j <= sliding_window (masking_utils
sliding_window_bidirectional_overlay, whose window the assistant flips to look back).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class AssistantStep(nn.Module):
    def __init__(self, assistant: Any, embed: torch.Tensor, scale: float) -> None:
        super().__init__()
        self.assistant = assistant
        self.embed = nn.Embedding.from_pretrained(embed * scale, freeze=True)
        self.window = int(assistant.config.get_text_config().sliding_window)

    def forward(
        self,
        input_ids: torch.Tensor,  # [B, 1] the last token
        hidden: torch.Tensor,  # [B, 1, Ht] the target's (or the last step's) row
        position_ids: torch.Tensor,  # [B, 1] the last token's position
        full_key: torch.Tensor,  # [B, heads, L, dim] the target's last global layer
        full_value: torch.Tensor,
        sliding_key: torch.Tensor,  # [B, heads, L, dim] the target's last sliding layer
        sliding_value: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.assistant
        x = a.pre_projection(torch.cat([self.embed(input_ids), hidden], dim=-1))
        length = sliding_key.shape[2]
        back = length - 1 - torch.arange(length, device=x.device)
        low = torch.finfo(x.dtype).min
        sliding = torch.where(back <= self.window, 0.0, low).to(x.dtype)[None, None, None]
        full = torch.zeros(1, 1, 1, full_key.shape[2], dtype=x.dtype)
        out = a.model(
            inputs_embeds=x,
            attention_mask={"full_attention": full, "sliding_attention": sliding},
            position_ids=position_ids,
            shared_kv_states={
                "full_attention": (full_key, full_value),
                "sliding_attention": (sliding_key, sliding_value),
            },
            use_cache=False,
        )
        last = out.last_hidden_state
        return a.lm_head(last), a.post_projection(last)


def store_layers(target_config: Any) -> dict[str, int]:
    """The target layer whose keys and values each attention type of the assistant
    reads: the last of that type that computes its own (transformers' "store" layers)."""
    modes = target_config.kv_sharing_modes
    types = target_config.layer_types
    found: dict[str, int] = {}
    for i, kind in enumerate(types):
        if modes[i] != "reuse":
            found[kind] = i
    return found
