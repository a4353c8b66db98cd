"""Recipe -> Plan: the steps one recipe expands to, each with its key.

Pure: no I/O and no heavy imports. The recipe declares; the planner decides. A
step's key is the sha256 of the canonical JSON of everything that decides its
output (its kind, options, the keys of its inputs, the library versions and the
code it runs) and nothing else, so steps of different recipes with equal keys
are one step, and run once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.canonical import key_of
from kiln.errors import KilnError, Location, Problem
from kiln.schema import Build, Checkpoint, Companion, PromptSet, Recipe
from kiln.toolchain import Toolchain, code_name

KINDS = ("fetch", "reference", "export", "onnx", "engine", "bundle", "validate")

# The ONNX opset the exporter targets. 17 is what the legacy (TorchScript)
# exporter handles best; it is 10-20x faster than dynamo (FIELD_NOTES).
OPSET = 17


@dataclass(frozen=True)
class Step:
    kind: str
    name: str  # for people: "export kiln-tiny/llama@86b0c01"
    options: dict[str, Any]
    inputs: dict[str, str]  # role -> key of the step that produces it
    material: dict[str, Any] = field(repr=False)  # exactly what the key hashes
    origin: tuple[str, ...] = ()  # the recipe key it comes from, for error locations
    role: str = "model"  # whose checkpoint: "model", or a companion role ("draft", ...)
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", key_of(self.material))


@dataclass(frozen=True)
class Plan:
    recipe: str
    steps: tuple[Step, ...]  # in dependency order

    def step(self, kind: str, role: str = "model") -> Step:
        for s in self.steps:
            if s.kind == kind and s.role == role:
                return s
        raise KeyError(kind)

    def by_key(self) -> dict[str, Step]:
        return {s.key: s for s in self.steps}


_ORIGIN = {
    "fetch": ("model", "revision"),
    "reference": ("validation",),
    "export": ("model",),
    "onnx": ("precision",),
    "engine": ("build",),
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
) -> Step:
    input_keys = {role: s.key for role, s in sorted(inputs.items())}
    material = {
        "kind": kind,
        "options": options,
        "inputs": input_keys,
        "libraries": tools.libraries(kind),
        "code": tools.code[code_name(kind, options.get("task"))],
    }
    origin = _ORIGIN[kind] if role == "model" else ("companions", role)
    return Step(kind, name, options, input_keys, material, origin, role)


# What this kiln has builders for. A recipe may declare more (the schema is the
# whole vocabulary); planning it fails with a clear error instead of pretending.
BUILDABLE: dict[tuple[str, ...], tuple[Any, ...]] = {
    ("precision", "weights"): ("fp32",),
    ("precision", "kv_cache"): ("auto",),
    ("precision", "compute"): ("fp32",),
    ("execution", "variant"): ("ordinary",),
    ("build", "backend"): ("onnxruntime",),
    ("build", "target"): ("cpu",),
    ("build", "tensor_parallel"): (1,),
    ("build", "prefill_chunk_len"): (0,),
}


def _check_buildable(recipe: Recipe) -> None:
    data = recipe.model_dump()
    problems = []
    for path, allowed in BUILDABLE.items():
        value = data[path[0]][path[1]]
        if value not in allowed:
            problems.append(
                Problem(
                    f"{value!r} is valid, but this kiln has no builder for it yet",
                    Location("", key_path=path),
                    f"buildable today: {', '.join(map(str, allowed))}",
                )
            )
    if recipe.companions:
        problems.append(
            Problem(
                "companions are valid, but this kiln cannot build them yet",
                Location("", key_path=("companions",)),
                "remove them to build",
            )
        )
    if problems:
        raise KilnError(problems)


# Tasks whose output is generated tokens (validation.max_new_tokens applies).
GENERATES = ("text-generation", "text2text-generation", "automatic-speech-recognition")


def _task(recipe: Recipe) -> dict[str, Any]:
    """The task, in the options of the steps it changes. text-generation, the
    default, adds nothing, so its keys stay what they were before tasks existed."""
    return {} if recipe.task == "text-generation" else {"task": recipe.task}


def _engine_chain(
    role: str,
    checkpoint: Checkpoint | Companion,
    build: Build,
    tools: Toolchain,
    task: dict[str, Any] | None = None,
) -> list[Step]:
    """fetch -> export -> onnx -> engine for one checkpoint. Companions (a draft
    model, an adapter's base) get their own chain; equal inputs give equal keys, so
    a checkpoint used by many recipes is fetched and exported once."""
    at = f"{checkpoint.repo}@{checkpoint.revision[:7]}"
    fetch = _step(
        "fetch",
        f"fetch {at}",
        {"repo": checkpoint.repo, "revision": checkpoint.revision},
        {},
        tools,
        role,
    )
    export = _step(
        "export",
        f"export {at}",
        {"opset": OPSET, "exporter": "torchscript", **(task or {})},
        {"checkpoint": fetch},
        tools,
        role,
    )
    graph = _step(
        "onnx", f"onnx {at}", {"optimize": True, **(task or {})}, {"export": export}, tools, role
    )
    engine = _step(
        "engine",
        f"engine {at} {build.backend}",
        {
            "backend": build.backend,
            "max_batch_size": build.max_batch_size,
            "max_seq_len": build.max_seq_len,
            **(task or {}),
        },
        {"onnx": graph},
        tools,
        role,
    )
    return [fetch, export, graph, engine]


def plan(name: str, recipe: Recipe, prompts: PromptSet, tools: Toolchain) -> Plan:
    """Expand one recipe. Only what decides an output goes into a step's options."""
    _check_buildable(recipe)
    chain = _engine_chain("model", recipe.model, recipe.build, tools, _task(recipe))
    fetch, engine = chain[0], chain[-1]
    check: dict[str, Any] = {"prompts": list(prompts.prompts)}
    if recipe.task in GENERATES:  # a classifier generates nothing: no tokens to count
        check["max_new_tokens"] = recipe.validation.max_new_tokens
    check.update(_task(recipe))
    at = f"{recipe.model.repo}@{recipe.model.revision[:7]}"
    reference = _step(
        "reference",
        f"reference {at} fp32",
        {**check, "dtype": "float32"},
        {"checkpoint": fetch},
        tools,
    )
    bundle = _step(
        "bundle",
        f"bundle {name}",
        {
            "variant": recipe.execution.variant,
            "precision": recipe.precision.model_dump(),
            **_task(recipe),
        },
        {"engine": engine, "checkpoint": fetch},
        tools,
    )
    validate = _step(
        "validate", f"validate {name}", check, {"bundle": bundle, "reference": reference}, tools
    )
    return Plan(name, (fetch, reference, *chain[1:], bundle, validate))
