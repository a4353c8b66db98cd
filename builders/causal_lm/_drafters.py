"""Our PyTorch drafter modules, written from the architecture facts in
spec_decoding_facts.md (sections 1-4); weight names follow the published checkpoints
so they load with load_state_dict. Attention is plain eager math (GQA, neox-style
RoPE as in HF Llama/Qwen3), so it traces to ONNX with the legacy exporter, and with
torch.export for the inductor engine (backends/_drafter.py, which runs Block's layers
over a static cache).

Every module takes and returns explicit key/value caches: the runtime owns them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in fp32, as HF's Qwen3/Llama RMSNorm: a bf16 program's (inductor) mean of
        # squares would otherwise round in bf16; fp32 inputs are unchanged
        h = x.float()
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype
        )


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Neox-style rotary embedding (HF rotate_half); x [b, heads, s, d], positions [b, s].
    A layout mismatch here fails silently (pitfall 7), so it is the target's own."""
    d = x.shape[-1]
    # on x's device (a CUDA program's constants are made there); in fp32, the result in
    # x's dtype (a bf16 inductor program's cache takes bf16; an fp32 x is unchanged)
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d))
    freqs = positions[:, None, :, None].float() * inv
    emb = torch.cat([freqs, freqs], dim=-1)
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], dim=-1)
    return (x * emb.cos() + half * emb.sin()).to(x.dtype)


class Mlp(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, cfg: dict[str, Any], in_width: int, qk_norm: bool) -> None:
        super().__init__()
        self.heads, self.kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.dim = cfg.get("head_dim") or cfg["hidden_size"] // self.heads
        self.theta = float(cfg.get("rope_theta", 10000.0))
        self.q_proj = nn.Linear(in_width, self.heads * self.dim, bias=False)
        self.k_proj = nn.Linear(in_width, self.kv_heads * self.dim, bias=False)
        self.v_proj = nn.Linear(in_width, self.kv_heads * self.dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.dim, cfg["hidden_size"], bias=False)
        eps = cfg.get("rms_norm_eps", 1e-6)
        self.q_norm = RMSNorm(self.dim, eps) if qk_norm else None
        self.k_norm = RMSNorm(self.dim, eps) if qk_norm else None

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        return x.view(x.shape[0], x.shape[1], heads, self.dim).transpose(1, 2)

    def keys_values(
        self, x: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        k = self._split(self.k_proj(x), self.kv_heads)
        if self.k_norm is not None:
            k = self.k_norm(k)
        return rope(k, positions, self.theta), self._split(self.v_proj(x), self.kv_heads)

    def attend(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        q = self._split(self.q_proj(x), self.heads)
        if self.q_norm is not None:
            q = self.q_norm(q)
        q = rope(q, positions, self.theta)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-1, -2) / self.dim**0.5
        if bias is not None:
            scores = scores + bias
        out = torch.softmax(scores, dim=-1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


def causal_bias(mask: torch.Tensor, queries: int) -> torch.Tensor:
    """Additive bias [b, 1, q, past+q]: query i (at past+i) sees keys j <= past+i that
    the attention mask keeps."""
    total = mask.shape[1]
    past = total - queries
    allowed = torch.arange(total)[None, :] <= (past + torch.arange(queries))[:, None]
    allowed = allowed[None, None] & (mask[:, None, None, :] > 0)
    return torch.where(allowed, 0.0, torch.finfo(torch.float32).min)


class Eagle3Layer(nn.Module):
    """EAGLE-3's midlayer: [input_layernorm(e), hidden_norm(g)] (2H) -> attention, with g
    itself as the residual; then post_attention_layernorm, SwiGLU, residual (section 1)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(h, eps)
        self.hidden_norm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(cfg, 2 * h, qk_norm=False)
        self.mlp = Mlp(h, cfg["intermediate_size"])


class Eagle3(nn.Module):
    """One draft step: (g or the recycled h, next tokens) -> logits over the draft
    vocabulary and the pre-norm h to recycle."""

    def __init__(self, cfg: dict[str, Any], embed: torch.Tensor) -> None:
        super().__init__()
        h = cfg["hidden_size"]
        self.embed = nn.Embedding.from_pretrained(embed, freeze=True)
        self.midlayer = Eagle3Layer(cfg)
        self.norm = RMSNorm(h, cfg.get("rms_norm_eps", 1e-6))
        self.lm_head = nn.Linear(h, cfg.get("draft_vocab_size") or cfg["vocab_size"], bias=False)

    def forward(
        self, hidden: Any, input_ids: Any, position_ids: Any, mask: Any, pk: Any, pv: Any
    ) -> Any:
        layer = self.midlayer
        x = torch.cat([layer.input_layernorm(self.embed(input_ids)), layer.hidden_norm(hidden)], -1)
        k, v = layer.self_attn.keys_values(x, position_ids)
        k, v = torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
        bias = causal_bias(mask, input_ids.shape[1])
        r = hidden + layer.self_attn.attend(x, position_ids, k, v, bias)
        out = r + layer.mlp(layer.post_attention_layernorm(r))
        return self.lm_head(self.norm(out)), out, k, v


class Fc(nn.Module):
    """EAGLE-3's fc: three concatenated target layers (3*Ht) -> H, no bias."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.fc = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        self.fc.weight.data.copy_(weight)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features)


class BlockLayer(nn.Module):
    """A Qwen3 decoder layer whose keys/values are [context, block] (KV injection)."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(h, eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.self_attn = Attention(cfg, h, qk_norm=True)
        self.mlp = Mlp(h, cfg["intermediate_size"])


class Block(nn.Module):
    """DFlash / DSpark backbone (sections 2-3): ctx = hidden_norm(fc(features)) is
    projected by every layer's own k_proj/v_proj at the context's positions; the block
    [last, mask...] attends to all context and to itself, non-causally. Returns the
    logits and post-norm hidden of every slot, and each layer's context keys/values."""

    def __init__(self, cfg: dict[str, Any], embed: torch.Tensor, head: torch.Tensor) -> None:
        super().__init__()
        h, eps = cfg["hidden_size"], cfg.get("rms_norm_eps", 1e-6)
        self.embed = nn.Embedding.from_pretrained(embed, freeze=True)
        self.head = nn.Linear(h, head.shape[0], bias=False)
        self.head.weight.data.copy_(head)
        self.fc = nn.Linear(int(cfg["_context_width"]), h, bias=False)
        self.hidden_norm = RMSNorm(h, eps)
        self.layers = nn.ModuleList(BlockLayer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(h, eps)

    def forward(
        self, context: Any, ctx_pos: Any, block_ids: Any, block_pos: Any, *past: Any
    ) -> Any:
        ctx = self.hidden_norm(self.fc(context))
        x = self.embed(block_ids)
        present = []
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            ck, cv = attn.keys_values(ctx, ctx_pos)
            ck, cv = torch.cat([past[2 * i], ck], dim=2), torch.cat([past[2 * i + 1], cv], dim=2)
            present += [ck, cv]
            h = layer.input_layernorm(x)
            bk, bv = attn.keys_values(h, block_pos)
            k, v = torch.cat([ck, bk], dim=2), torch.cat([cv, bv], dim=2)
            x = x + attn.attend(h, block_pos, k, v, None)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        out = self.norm(x)
        return (self.head(out), out, *present)


class Markov(nn.Module):
    """DSpark's vanilla Markov head and confidence head (section 3): bias = W2 W1[prev],
    confidence = sigmoid(proj(cat(h, W1[prev])))."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        vocab, rank, h = cfg["vocab_size"], cfg["markov_rank"], cfg["hidden_size"]
        self.markov_w1 = nn.Embedding(vocab, rank)
        self.markov_w2 = nn.Linear(rank, vocab, bias=False)
        self.with_markov = bool(cfg.get("confidence_head_with_markov", True))
        self.proj = nn.Linear(h + rank if self.with_markov else h, 1)

    def forward(self, hidden: torch.Tensor, prev_ids: torch.Tensor) -> Any:
        w = self.markov_w1(prev_ids)
        feats = torch.cat([hidden, w], dim=-1) if self.with_markov else hidden
        return self.markov_w2(w), torch.sigmoid(self.proj(feats))[:, 0]


class Mtp(nn.Module):
    """DeepSeek-V3's MTP module (section 4): x = eh_proj([enorm(emb(t+1)), hnorm(h)])
    (embedding first, pitfall 4), one full decoder layer (transformers' own MLA + MoE
    layer), logits = head(shared_head.norm(x)); the post-norm output is recycled."""

    def __init__(self, config: Any, embed: torch.Tensor, head: torch.Tensor) -> None:
        super().__init__()
        from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

        d, eps = config.hidden_size, config.rms_norm_eps
        self.config = config
        self.embed = nn.Embedding.from_pretrained(embed, freeze=True)
        self.enorm, self.hnorm = RMSNorm(d, eps), RMSNorm(d, eps)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.layer = ds.DeepseekV3DecoderLayer(config, layer_idx=config.num_hidden_layers)
        self.layer.self_attn.layer_idx = 0  # its own one-layer cache
        self.rotary = ds.DeepseekV3RotaryEmbedding(config)
        self.shared_norm = RMSNorm(d, eps)
        self.head = nn.Linear(d, head.shape[0], bias=False)
        self.head.weight.data.copy_(head)

    def forward(
        self, hidden: Any, input_ids: Any, position_ids: Any, mask: Any, pk: Any, pv: Any
    ) -> Any:
        from transformers import DynamicCache

        x = self.eh_proj(torch.cat([self.enorm(self.embed(input_ids)), self.hnorm(hidden)], -1))
        cache = DynamicCache(config=self.config)
        if pk is not None:  # None: a probe forward that reads the cache's real shapes
            cache.update(pk, pv, 0)
        x = self.layer(
            x,
            attention_mask=causal_bias(mask, input_ids.shape[1]),
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
            position_embeddings=self.rotary(x, position_ids),
        )
        x = x[0] if isinstance(x, tuple) else x
        out = self.shared_norm(x)
        layer = cache.layers[0]
        return self.head(out), out, layer.keys, layer.values
