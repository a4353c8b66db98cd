"""Which target hidden states a drafter reads, and how the exported graph captures them.

Layer-index conventions differ between codebases and an off-by-one costs acceptance
silently (spec_decoding_facts.md, "Check this first"; vLLM PR #40727, SGLang PR
#25454). kiln names every capture point in one convention, "pre:i": the residual
stream entering decoder layer i, i.e. HF hidden_states[i] (pre:0 is the embedding
output, pre:N the last layer's output before the final norm). "final" is the output
of the final norm, which DeepSeek-V3's MTP reads (section 4, pitfall 4).

  * EAGLE-3 ids are already "capture before layer i": eagle_aux_hidden_state_layer_ids
    (speculators) or eagle_config.eagle_aux_hidden_state_layer_ids (SpecForge),
    default (2, N//2, N-3).
  * DFlash / DSpark ids are "output of layer L" = pre:L+1: dflash_config.target_layer_ids
    (DFlash) or top-level target_layer_ids (DSpark); default [N//2] for one draft
    layer, else evenly spaced and rounded from 1 to N-3.
"""

from __future__ import annotations

from typing import Any


def _dflash_default(n_target: int, n_draft: int) -> list[int]:
    if n_draft == 1:
        return [n_target // 2]
    step = (n_target - 4) / (n_draft - 1)
    return [round(1 + i * step) for i in range(n_draft)]


def capture_points(variant: str, target: dict[str, Any], drafter: dict[str, Any]) -> list[str]:
    n = int(target["num_hidden_layers"])
    if variant == "mtp":
        return ["final"]
    if variant == "eagle3":
        ids = drafter.get("eagle_aux_hidden_state_layer_ids") or (
            drafter.get("eagle_config") or {}
        ).get("eagle_aux_hidden_state_layer_ids")
        pre = list(ids) if ids else [2, n // 2, n - 3]
    elif variant in ("dflash", "dspark"):
        where = drafter.get("dflash_config") or {} if variant == "dflash" else drafter
        ids = where.get("target_layer_ids") or _dflash_default(n, drafter["num_hidden_layers"])
        pre = [i + 1 for i in ids]
    else:
        raise ValueError(f"variant {variant!r} reads no hidden states")
    bad = [i for i in pre if not 0 <= i <= n]
    if bad:
        raise ValueError(f"capture points {bad} are outside the target's 0..{n} layers")
    return [f"pre:{i}" for i in pre]


def install_hooks(model: Any, points: list[str]) -> dict[str, Any]:
    """Forward hooks that store each capture point's tensor into the returned dict
    (filled on every forward; the graph exporter traces through them)."""
    inner = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    seen: dict[str, Any] = {}

    def keep(name: str) -> Any:
        def hook(_module: Any, _args: Any, output: Any) -> None:
            seen[name] = output[0] if isinstance(output, tuple) else output

        return hook

    for point in set(points):
        if point == "final":
            inner.norm.register_forward_hook(keep(point))
        elif point == "pre:0":
            inner.embed_tokens.register_forward_hook(keep(point))
        else:
            index = int(point.split(":")[1]) - 1
            inner.layers[index].register_forward_hook(keep(point))
    return seen
