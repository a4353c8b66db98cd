"""Tiny companions and speculative checkpoints, generated like the tiny targets.

Each is a pure function of its spec and the target's files, so its revision (the
sha1 of its file listing) is as deterministic as theirs:

  * kiln-tiny/llama-draft: the tiny Llama with its second layer dropped. Its
    tensors are drawn from the *target's* seed stream (same names, same values), so
    it agrees with the target often: acceptance is neither zero nor one, and both
    paths of verification run.
  * kiln-tiny/qwen3-lora: a peft LoRA adapter for kiln-tiny/qwen3. adapter_config.json
    records the base as base_model_name_or_path plus peft's own `revision` field,
    pinned to the base's 40-hex revision (peft leaves it null by default: issue #1567).
  * kiln-tiny/deepseek-v3-mtp: a DeepseekV3ForCausalLM (MLA attention, MoE) with one
    DeepSeek-V3 MTP module as layer num_hidden_layers (README_WEIGHTS.md names).
  * kiln-tiny/qwen3-eagle3, -dflash, -dspark: drafters for kiln-tiny/qwen3 in the
    published checkpoint formats (spec_decoding_facts.md 1-3), random weights.
  * kiln-tiny/gemma4-assistant: a Gemma4AssistantForCausalLM for kiln-tiny/gemma4, as
    google/gemma-4-E2B-it-assistant is for its target: a narrower decoder (hidden 32)
    whose layers all read the target's keys and values (one sliding, one global
    layer, the target's head shapes), between projections from and to the target's
    width; random weights, its head tied to its embedding as the published one is.
"""

from __future__ import annotations

from typing import Any

TARGET = "kiln-tiny/qwen3"
H, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB = 64, 4, 2, 16, 128, 512

DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "vocab_size": VOCAB,
    "hidden_size": H,
    "intermediate_size": FFN,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_nextn_predict_layers": 1,
    "num_attention_heads": HEADS,
    "num_key_value_heads": HEADS,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 8,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "torch_dtype": "float32",
}

GEMMA4_ASSISTANT: dict[str, Any] = {
    "architectures": ["Gemma4AssistantForCausalLM"],
    "model_type": "gemma4_assistant",
    "backbone_hidden_size": H,
    "use_ordered_embeddings": False,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "text_config": {
        "model_type": "gemma4_text",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "global_head_dim": 32,  # the target's (tinyhub/specs.py kiln-tiny/gemma4)
        "sliding_window": 8,
        "layer_types": ["sliding_attention", "full_attention"],
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 0,
        "num_kv_shared_layers": 2,
        "max_position_embeddings": 512,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    },
}

_LAYER: dict[str, Any] = {
    "hidden_size": H,
    "intermediate_size": FFN,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "max_position_embeddings": 512,
    "vocab_size": VOCAB,
    "torch_dtype": "float32",
}
EAGLE3: dict[str, Any] = {
    **_LAYER,
    "architectures": ["LlamaForCausalLMEagle3"],
    "model_type": "llama",
    "num_hidden_layers": 1,
    "draft_vocab_size": 256,
    "target_hidden_size": H,
    # "capture before layer i" (HF hidden_states[i]); the default (2, N//2, N-3) needs
    # N >= 5 layers, the tiny target has 2, so the checkpoint names its own.
    "eagle_aux_hidden_state_layer_ids": [0, 1, 2],
    "tie_word_embeddings": False,
}
DFLASH: dict[str, Any] = {
    **_LAYER,
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "num_hidden_layers": 1,
    "block_size": 8,
    "num_target_layers": 2,
    # "output of layer L" (HF hidden_states[L+1]); mask id: the tiny vocab's pad.
    "dflash_config": {"mask_token_id": 0, "target_layer_ids": [0, 1]},
}
DSPARK: dict[str, Any] = {
    **_LAYER,
    "architectures": ["Qwen3DSparkModel"],
    "model_type": "qwen3",
    "num_hidden_layers": 1,
    "block_size": 7,
    "num_target_layers": 2,
    "mask_token_id": 0,  # top-level in DSpark, not under dflash_config
    "target_layer_ids": [0, 1],
    "markov_rank": 16,
    "markov_head_type": "vanilla",
    "enable_confidence_head": True,
    "confidence_head_with_markov": True,
    "tie_word_embeddings": False,
}


def _qwen3_layer(prefix: str, q_norm: bool, in_width: int = H) -> dict[str, tuple[int, ...]]:
    shapes = {
        f"{prefix}.input_layernorm.weight": (H,),
        f"{prefix}.post_attention_layernorm.weight": (H,),
        f"{prefix}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, in_width),
        f"{prefix}.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, in_width),
        f"{prefix}.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, in_width),
        f"{prefix}.self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
        f"{prefix}.mlp.gate_proj.weight": (FFN, H),
        f"{prefix}.mlp.up_proj.weight": (FFN, H),
        f"{prefix}.mlp.down_proj.weight": (H, FFN),
    }
    if q_norm:
        shapes[f"{prefix}.self_attn.q_norm.weight"] = (HEAD_DIM,)
        shapes[f"{prefix}.self_attn.k_norm.weight"] = (HEAD_DIM,)
    return shapes


def eagle3_shapes() -> dict[str, tuple[int, ...]]:
    shapes = _qwen3_layer("midlayer", q_norm=False, in_width=2 * H)
    shapes.update(
        {
            "fc.weight": (H, 3 * H),
            "midlayer.hidden_norm.weight": (H,),
            "norm.weight": (H,),
            "lm_head.weight": (EAGLE3["draft_vocab_size"], H),
        }
    )
    return shapes


def dflash_shapes(dspark: bool) -> dict[str, tuple[int, ...]]:
    spec = DSPARK if dspark else DFLASH
    k = len(spec["target_layer_ids"] if dspark else spec["dflash_config"]["target_layer_ids"])
    shapes = _qwen3_layer("layers.0", q_norm=True)
    shapes.update({"fc.weight": (H, k * H), "hidden_norm.weight": (H,), "norm.weight": (H,)})
    if dspark:
        r = spec["markov_rank"]
        shapes.update(
            {
                "markov_head.markov_w1.weight": (VOCAB, r),
                "markov_head.markov_w2.weight": (VOCAB, r),
                "confidence_head.proj.weight": (1, H + r),
                "confidence_head.proj.bias": (1,),
            }
        )
    return shapes


def mtp_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The MTP module's tensors: one more decoder layer (named by transformers) plus
    enorm, hnorm, eh_proj and shared_head.norm (DeepSeek-V3 README_WEIGHTS.md)."""
    from tinyhub import parameter_shapes

    n = config["num_hidden_layers"]
    deeper = parameter_shapes({**config, "num_hidden_layers": n + 1})
    prefix = f"model.layers.{n}."
    shapes = {k: v for k, v in deeper.items() if k.startswith(prefix)}
    d = config["hidden_size"]
    shapes.update(
        {
            f"{prefix}enorm.weight": (d,),
            f"{prefix}hnorm.weight": (d,),
            f"{prefix}eh_proj.weight": (d, 2 * d),
            f"{prefix}shared_head.norm.weight": (d,),
        }
    )
    return shapes


def _tensors(seed_repo: str, shapes: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    from tinyhub import tensor_values

    return {name: tensor_values(seed_repo, name, shape) for name, shape in sorted(shapes.items())}


def _with_target_head(tensors: dict[str, Any]) -> dict[str, Any]:
    """DSpark ships frozen copies of the target's embed_tokens and lm_head."""
    from tinyhub import tensor_values

    for name, mine in (
        ("model.embed_tokens.weight", "embed_tokens.weight"),
        ("lm_head.weight", "lm_head.weight"),
    ):
        tensors[mine] = tensor_values(TARGET, name, (VOCAB, H))
    return tensors


def eagle3_tensors(repo: str) -> dict[str, Any]:
    import numpy as np

    tensors = _tensors(repo, eagle3_shapes())
    # The draft vocabulary: the even target ids, as a sorted table. d2t holds offsets
    # (target = draft + d2t[draft]); t2d marks target ids the drafter can emit.
    draft_vocab = EAGLE3["draft_vocab_size"]
    target_ids = np.arange(draft_vocab, dtype=np.int64) * 2
    tensors["d2t"] = target_ids - np.arange(draft_vocab, dtype=np.int64)
    t2d = np.zeros(VOCAB, dtype=bool)
    t2d[target_ids] = True
    tensors["t2d"] = t2d
    return tensors


def lora_files(base_repo: str, base_revision: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(adapter_config, tensors) of a rank-4 adapter on q_proj, v_proj and down_proj."""
    from tinyhub import SPECS

    rank = 4
    config = SPECS[base_repo]
    shapes: dict[str, tuple[int, ...]] = {}
    dims = {
        "self_attn.q_proj": (config["hidden_size"], config["num_attention_heads"] * HEAD_DIM),
        "self_attn.v_proj": (config["hidden_size"], config["num_key_value_heads"] * HEAD_DIM),
        "mlp.down_proj": (config["intermediate_size"], config["hidden_size"]),
    }
    for layer in range(config["num_hidden_layers"]):
        for module, (fan_in, fan_out) in dims.items():
            stem = f"base_model.model.model.layers.{layer}.{module}"
            shapes[f"{stem}.lora_A.weight"] = (rank, fan_in)
            shapes[f"{stem}.lora_B.weight"] = (fan_out, rank)
    adapter_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_repo,
        "revision": base_revision,
        "r": rank,
        "lora_alpha": 8,
        "lora_dropout": 0.0,
        "target_modules": ["down_proj", "q_proj", "v_proj"],
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "modules_to_save": None,
        "inference_mode": True,
    }
    return adapter_config, _tensors("kiln-tiny/qwen3-lora", shapes)


def assistant_tensors(repo: str) -> dict[str, Any]:
    """The assistant's tensors as transformers names them; the head is tied to the
    embedding, so the checkpoint carries the embedding only."""
    from tinyhub import parameter_shapes

    shapes = parameter_shapes(GEMMA4_ASSISTANT)
    shapes.pop("lm_head.weight")
    return _tensors(repo, shapes)


def companion_files(repo: str) -> dict[str, bytes]:
    """Every file of a companion checkpoint, by path."""
    from safetensors.numpy import save

    from tinyhub import checkpoint_files, json_bytes, revision_of

    if repo == "kiln-tiny/qwen3-lora":
        config, tensors = lora_files(TARGET, revision_of(checkpoint_files(TARGET)))
        return {
            "adapter_config.json": json_bytes(config),
            "adapter_model.safetensors": save(tensors, metadata={"format": "pt"}),
        }
    kind = repo.rsplit("-", 1)[1]
    if kind == "assistant":
        config, tensors = GEMMA4_ASSISTANT, assistant_tensors(repo)
    elif kind == "eagle3":
        config, tensors = EAGLE3, eagle3_tensors(repo)
    elif kind == "dflash":
        config, tensors = DFLASH, _tensors(repo, dflash_shapes(dspark=False))
    else:
        config, tensors = DSPARK, _with_target_head(_tensors(repo, dflash_shapes(dspark=True)))
    return {
        "config.json": json_bytes(config),
        "model.safetensors": save(tensors, metadata={"format": "pt"}),
    }
