"""What every model shares: the base model (`Strict`), pinned names and ids, the
verdicts and scopes, the metrics table that errors, the editor schema and the site
read, and the help each pattern gets in an error."""

import json
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
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
    "tokens that greedy decoding with drafting reproduces, token for token (lossless is 1.0); on "
    "the inductor backend both run through the verify program.",
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
    "max_abs_pixel_diff": "image-text-to-text: largest |bundle - reference| pixel value of "
    "every validation image (the runtime's numpy preprocessing against the checkpoint's "
    "own processor in transformers).",
    "image_sensitivity": "image-text-to-text: largest |logit| change at the last prompt "
    "position when the bundle's first validation prompt is given another image.",
    "reference_image_sensitivity": "image-text-to-text: the same change in the fp32 "
    "reference (informative: what image_sensitivity_ratio divides by).",
    "image_sensitivity_ratio": "image-text-to-text: image_sensitivity / "
    "reference_image_sensitivity; a bundle that ignored its images would score 0.",
    "world_size": "Tensor-parallel bundles: the ranks the bundle ran as (build.tensor_parallel), "
    "each a process of its own over its own weight shard.",
    "rank_weight_bytes": "Tensor-parallel bundles: the largest rank's weight bytes, read from "
    "its shard in the engine file (split and replicated weights together).",
    "rank_split_fraction": "Tensor-parallel bundles: the largest rank's share of the split "
    "weights' bytes (q/k/v, o, gate/up, down), read from the shards: 1/world_size when even.",
    "replicated_weight_bytes": "Tensor-parallel bundles: the bytes every rank holds whole "
    "(embedding, norms, output projection), read from rank 0's shard.",
}

# The unit of a metric that has one (the site's plot scales print it; issue 44). A
# metric not listed is a ratio, a rate or a count that its name already says.
UNITS: dict[str, str] = {
    "decode_tokens_per_s": "tokens/s",
    "classify_texts_per_s": "texts/s",
    "embed_texts_per_s": "texts/s",
    "first_divergence": "tokens",
    "log_perplexity_ratio": "nats",
    "scored_positions": "positions",
    "rank_weight_bytes": "bytes",
    "replicated_weight_bytes": "bytes",
    "world_size": "ranks",
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
