"""The breadth catalog's tiny checkpoints: one per architecture of the reference
support matrix that transformers implements (catalog/architectures.yaml lists them
all, with the verdicts).

Each entry is the architecture's real config with its sizes shrunk to the tiny
common ones (hidden 64, 2 layers, 4 heads, 2 KV heads, head_dim 16, vocab 512);
transformers fills every other field with its default. Where an architecture has
its own shape parameters (experts, MLA ranks, Mamba heads, linear-attention heads,
layer patterns), they are shrunk too, and every distinct layer kind of the real
model appears at least once. Sliding windows are 8 tokens so that the default
prompts (up to ~30 tokens plus 32 new) run far past the window.

Editing an entry changes that checkpoint's revision (tests pin every revision
through the recipes); the llama and qwen3 entries live in tinyhub/__init__.py and
must not change.
"""

from __future__ import annotations

from typing import Any


def breadth_specs(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    common = {**base, "head_dim": 16}
    return {
        "kiln-tiny/mistral": {
            **common,
            "architectures": ["MistralForCausalLM"],
            "model_type": "mistral",
            "sliding_window": 8,
        },
        "kiln-tiny/mixtral": {
            **common,
            "architectures": ["MixtralForCausalLM"],
            "model_type": "mixtral",
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 8,
        },
        "kiln-tiny/qwen2": {
            **common,
            "architectures": ["Qwen2ForCausalLM"],
            "model_type": "qwen2",
            "sliding_window": 8,
            "layer_types": ["full_attention", "full_attention"],
        },
        "kiln-tiny/qwen3-moe": {
            **common,
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "moe_intermediate_size": 32,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 8,
        },
        "kiln-tiny/qwen3-next": {
            **common,
            "architectures": ["Qwen3NextForCausalLM"],
            "model_type": "qwen3_next",
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "shared_expert_intermediate_size": 32,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "layer_types": ["linear_attention", "full_attention"],
        },
        "kiln-tiny/gemma3": {
            **common,
            "architectures": ["Gemma3ForCausalLM"],
            "model_type": "gemma3_text",
            "sliding_window": 8,
            "query_pre_attn_scalar": 16,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        # Gemma 4's text decoder as gemma-4-E2B has it: per-layer embeddings (PLE), wider
        # global heads (global_head_dim) with proportional partial rope, soft-capped
        # logits, and KV-shared layers last (they attend to the keys and values of the
        # last earlier layer of their type and cache nothing).
        "kiln-tiny/gemma4": {
            **common,
            "architectures": ["Gemma4ForCausalLM"],
            "model_type": "gemma4_text",
            "sliding_window": 8,
            "global_head_dim": 32,
            "hidden_size_per_layer_input": 8,
            "vocab_size_per_layer_input": 512,
            "num_hidden_layers": 4,
            "num_kv_shared_layers": 2,
            "final_logit_softcapping": 30.0,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
        },
        "kiln-tiny/phi3": {
            **common,
            "architectures": ["Phi3ForCausalLM"],
            "model_type": "phi3",
            "sliding_window": 8,
        },
        "kiln-tiny/gpt-oss": {
            **common,
            "architectures": ["GptOssForCausalLM"],
            "model_type": "gpt_oss",
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        "kiln-tiny/deepseek-v3": {
            **common,
            "architectures": ["DeepseekV3ForCausalLM"],
            "model_type": "deepseek_v3",
            "moe_intermediate_size": 32,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "kv_lora_rank": 16,
            "q_lora_rank": 24,
            "qk_rope_head_dim": 8,
            "head_dim": 8,  # MLA: head_dim is the rope part
            "num_key_value_heads": 4,  # MLA keys have one head per query head
            "qk_nope_head_dim": 16,
            "v_head_dim": 16,
            "qk_head_dim": 24,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            "num_nextn_predict_layers": 0,
        },
        "kiln-tiny/exaone4": {
            **common,
            "architectures": ["Exaone4ForCausalLM"],
            "model_type": "exaone4",
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        "kiln-tiny/cohere2": {
            **common,
            "architectures": ["Cohere2ForCausalLM"],
            "model_type": "cohere2",
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        "kiln-tiny/glm4-moe": {
            **common,
            "architectures": ["Glm4MoeForCausalLM"],
            "model_type": "glm4_moe",
            "moe_intermediate_size": 32,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            "num_nextn_predict_layers": 0,
        },
        "kiln-tiny/nemotron": {
            **common,
            "architectures": ["NemotronForCausalLM"],
            "model_type": "nemotron",
        },
        "kiln-tiny/nemotron-h": {
            **common,
            "architectures": ["NemotronHForCausalLM"],
            "model_type": "nemotron_h",
            "moe_intermediate_size": 32,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "sliding_window": 8,
            "mamba_num_heads": 4,
            "mamba_head_dim": 16,
            "ssm_state_size": 8,
            "n_groups": 1,
            "moe_shared_expert_intermediate_size": 32,
            "num_nextn_predict_layers": 0,
        },
        "kiln-tiny/afmoe": {
            **common,
            "architectures": ["AfmoeForCausalLM"],
            "model_type": "afmoe",
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "num_shared_experts": 1,
            "num_dense_layers": 1,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        "kiln-tiny/deepseek-v32": {
            **common,
            "architectures": ["DeepseekV32ForCausalLM"],
            "model_type": "deepseek_v32",
            "moe_intermediate_size": 32,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "kv_lora_rank": 16,
            "q_lora_rank": 24,
            "qk_rope_head_dim": 8,
            "head_dim": 8,  # MLA: head_dim is the rope part
            "num_key_value_heads": 4,  # MLA keys have one head per query head
            "qk_nope_head_dim": 16,
            "v_head_dim": 16,
            "qk_head_dim": 24,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            "index_topk": 4,
            "index_head_dim": 16,
            "index_n_heads": 2,
            "layer_types": ["indexed_attention", "indexed_attention"],
            "mlp_layer_types": ["dense", "sparse"],
        },
        "kiln-tiny/exaone-moe": {
            **common,
            "architectures": ["ExaoneMoeForCausalLM"],
            "model_type": "exaone_moe",
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "num_shared_experts": 1,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
            "mlp_layer_types": ["dense", "sparse"],
        },
        "kiln-tiny/glm-moe-dsa": {
            **common,
            "architectures": ["GlmMoeDsaForCausalLM"],
            "model_type": "glm_moe_dsa",
            "moe_intermediate_size": 32,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "n_shared_experts": 1,
            "kv_lora_rank": 16,
            "q_lora_rank": 24,
            "qk_rope_head_dim": 8,
            "head_dim": 8,  # MLA: head_dim is the rope part
            "num_key_value_heads": 4,  # MLA keys have one head per query head
            "qk_nope_head_dim": 16,
            "v_head_dim": 16,
            "qk_head_dim": 24,
            "n_group": 1,
            "topk_group": 1,
            "first_k_dense_replace": 1,
            "index_topk": 4,
            "index_head_dim": 16,
            "index_n_heads": 2,
            "layer_types": ["indexed_attention", "indexed_attention"],
            "mlp_layer_types": ["dense", "sparse"],
        },
        "kiln-tiny/kimi-linear": {
            **common,
            "architectures": ["KimiLinearForCausalLM"],
            "model_type": "kimi_linear",
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_token": 2,
            "num_shared_experts": 1,
            "kv_lora_rank": 16,
            "q_lora_rank": 24,
            "qk_rope_head_dim": 8,
            "head_dim": 8,  # MLA: head_dim is the rope part
            "num_key_value_heads": 4,  # MLA keys have one head per query head
            "qk_nope_head_dim": 16,
            "v_head_dim": 16,
            "qk_head_dim": 24,
            "topk_group": 1,
            "layer_types": ["linear_attention", "full_attention"],
            "mlp_layer_types": ["dense", "sparse"],
        },
        "kiln-tiny/laguna": {
            **common,
            "architectures": ["LagunaForCausalLM"],
            "model_type": "laguna",
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "shared_expert_intermediate_size": 32,
            "sliding_window": 8,
            "layer_types": ["full_attention", "full_attention"],
            "mlp_layer_types": ["dense", "sparse"],
        },
        "kiln-tiny/qwen3-5-moe": {
            **common,
            "architectures": ["Qwen3_5MoeForCausalLM"],
            "model_type": "qwen3_5_moe_text",
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "shared_expert_intermediate_size": 32,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "layer_types": ["linear_attention", "full_attention"],
        },
    }


def task_specs(base: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Tiny checkpoints of the matrix's non-decoder tasks: an encoder classifier and
    encoder-decoders (FIELD_NOTES: T5 needs decoder_start_token_id=0)."""
    ids = {k: base[k] for k in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id")}
    seq2seq = {
        **ids,
        "d_model": 64,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 128,
        "decoder_ffn_dim": 128,
        "max_position_embeddings": 512,
        "decoder_start_token_id": base["eos_token_id"],
    }
    return {
        "kiln-tiny/bert-classifier": {
            **ids,
            "architectures": ["BertForSequenceClassification"],
            "model_type": "bert",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 512,
            "num_labels": 2,
        },
        # feature-extraction: a bare encoder whose states are pooled into one vector
        # (SENTENCE_MODULES says how, as sentence-transformers checkpoints do).
        "kiln-tiny/bert-embed": {
            **ids,
            "architectures": ["BertModel"],
            "model_type": "bert",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 512,
        },
        "kiln-tiny/bart": {
            **seq2seq,
            "architectures": ["BartForConditionalGeneration"],
            "model_type": "bart",
        },
        "kiln-tiny/mbart": {
            **seq2seq,
            "architectures": ["MBartForConditionalGeneration"],
            "model_type": "mbart",
        },
        "kiln-tiny/t5": {
            **ids,
            "architectures": ["T5ForConditionalGeneration"],
            "model_type": "t5",
            "d_model": 64,
            "d_kv": 16,
            "d_ff": 128,
            "num_layers": 2,
            "num_decoder_layers": 2,
            "num_heads": 4,
            "decoder_start_token_id": 0,
            "max_position_embeddings": 512,  # not a T5 field; sizes the tokenizer config
        },
        "kiln-tiny/whisper": {
            **seq2seq,
            "architectures": ["WhisperForConditionalGeneration"],
            "model_type": "whisper",
            "num_mel_bins": 16,
            # 100 log-mel frames (the encoder's two convolutions halve them to 50
            # positions): 1 s of 16 kHz audio at Whisper's hop of 160 samples, so the
            # preprocessor below is Whisper's own with a 1 s chunk instead of 30 s.
            "max_source_positions": 50,
            "max_target_positions": 512,
        },
    }


# Feature extractors shipped as preprocessor_config.json, as real checkpoints ship
# theirs (openai/whisper-*: 16 kHz, n_fft 400, hop 160, 30 s chunks). num_mel_bins
# and max_source_positions above must agree: frames = chunk * rate / hop = 2 * 50.
PREPROCESSORS: dict[str, dict[str, Any]] = {
    "kiln-tiny/whisper": {
        "feature_extractor_type": "WhisperFeatureExtractor",
        "processor_class": "WhisperProcessor",
        "feature_size": 16,
        "sampling_rate": 16000,
        "hop_length": 160,
        "n_fft": 400,
        "chunk_length": 1,
        "n_samples": 16000,
        "nb_max_frames": 100,
        "padding_side": "right",
        "padding_value": 0.0,
        "return_attention_mask": False,
    },
}


# sentence-transformers' module files of a tiny checkpoint, by repo: mean pooling then
# L2 normalization, as sentence-transformers/all-MiniLM-L6-v2 declares them.
SENTENCE_MODULES: dict[str, dict[str, Any]] = {
    "kiln-tiny/bert-embed": {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {
                "idx": 1,
                "name": "1",
                "path": "1_Pooling",
                "type": "sentence_transformers.models.Pooling",
            },
            {
                "idx": 2,
                "name": "2",
                "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize",
            },
        ],
        "1_Pooling/config.json": {
            "word_embedding_dimension": 64,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
        },
    }
}
