"""What each execution variant adds to a plan: companions, export options, drafters.

Pure data about variants, used by kiln/plan/__init__.py; no I/O and no heavy imports.

  variant   companion         target export            extra steps       runtime
  ordinary  -                 plain                    (mtp engines*)    one token / forward
  draft     draft (a model)   plain                    draft chain       runtime/drafters.py
  ngram     -                 plain                    -                 runtime/ngram.py
  lora      adapter           adapter merged           -                 one token / forward
  mtp       -                 + post-norm hidden       drafter (mtp)     runtime/drafters.py
            draft**           + post-norm hidden       drafter (mtp)     runtime/drafters.py
  eagle3    draft (drafter)   + 3 layers' hidden       drafter (eagle3)  runtime/drafters.py
  dflash    draft (drafter)   + target layers' hidden  drafter (dflash)  runtime/drafters.py
  dspark    draft (drafter)   + target layers' hidden  drafter (dspark)  runtime/drafters.py

* build.mtp_engines: an ordinary build of a checkpoint with MTP weights builds the base
  engine only; the option adds the MTP engine (and the hidden output it reads).
** Gemma 4's MTP assistant (Gemma4AssistantForCausalLM) is a companion checkpoint, as
  transformers' generate takes it (assistant_model); it also reads the target's cached
  keys and values (builders/causal_lm/_assistant.py).

On the inductor backend a dflash/dspark drafter is no step of its own: the target's
engine step takes the drafter's checkpoint and holds its programs beside the target's,
whose programs return the hidden states it reads (builders/causal_lm/backends/_drafter.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.plan.step import Step
    from kiln.schema import Recipe

DRAFTERS = ("mtp", "eagle3", "dflash", "dspark")


def drafter_kind(recipe: Recipe) -> str | None:
    """The drafter engine the bundle holds, if any."""
    variant = recipe.execution.variant
    if variant in DRAFTERS:
        return variant
    if recipe.build.mtp_engines:
        return "mtp"
    return None


def hidden(recipe: Recipe) -> str:
    """The drafter whose hidden states the target's graph also outputs, or 'none'."""
    return drafter_kind(recipe) or "none"


# The drafters the inductor engine holds among its own programs.
ENGINE_DRAFTERS = ("dflash", "dspark")


def engine_drafter(build: Any, hidden: str) -> str:
    """The drafter an engine step of `build` holds (its `hidden`: the variant's drafter),
    or 'none': the inductor engine holds DFlash/DSpark's."""
    return hidden if build.backend == "inductor" and hidden in ENGINE_DRAFTERS else "none"


def export_inputs(recipe: Recipe, companions: dict[str, Step]) -> dict[str, Step]:
    """An adapter is merged at export; a drafter's config says which layers to output."""
    inputs = {}
    if recipe.execution.variant == "lora":
        inputs["adapter"] = companions["adapter"]
    if recipe.execution.variant in ("eagle3", "dflash", "dspark"):
        inputs["drafter"] = companions["draft"]
    return inputs


def reference_inputs(recipe: Recipe, companions: dict[str, Step]) -> dict[str, Step]:
    """A LoRA recipe is judged against peft's PeftModel on the same base."""
    return {"adapter": companions["adapter"]} if recipe.execution.variant == "lora" else {}


def speculative(recipe: Recipe) -> dict[str, Any]:
    """What the runtime drafts with (bundle.json "speculative"); empty if it does not."""
    params = recipe.execution.model_dump(exclude={"variant"})
    if recipe.execution.variant in ("dflash", "dspark"):
        params["max_draft_len"] = params["block_length"]
    return params if "max_draft_len" in params else {}


def verify_len(recipe: Recipe) -> int:
    """Tokens a verify forward feeds (the last committed token and max_draft_len
    drafts), for an engine that compiles one program per length; 0 if it drafts not."""
    params = speculative(recipe)
    return int(params["max_draft_len"]) + 1 if params else 0
