"""Tensor parallelism for the inductor backend (build.tensor_parallel N, issue 42): one
weight shard per rank, Megatron's split (Shoeybi et al. 2019, section 3), as gpt-fast's
tp.py applies it to a Llama:

  column-parallel  q_proj, k_proj, v_proj by heads (each rank holds heads/N query heads
                   and kv_heads/N key/value heads, split separately so each rank's query
                   heads read their own key/value heads: grouped-query attention stays
                   whole on a rank); gate_proj and up_proj by intermediate_size/N rows
  row-parallel     o_proj and down_proj by the matching input columns: each rank's
                   product is a partial sum of the output, and the ranks' partial sums
                   are added by an all-reduce (torch.distributed's functional
                   all_reduce, traced into the programs: `reduce_rows`); a bias is
                   added by rank 0 alone
  replicated       the embedding, the norms (Qwen3's per-head q_norm/k_norm too) and
                   the output projection (lm_head): every rank computes the whole
                   logits row from the same reduced hidden state, so every rank picks
                   the same greedy token with no all-gather, and rank 0's logits are
                   the bundle's. Vocabulary-parallel would save each rank
                   (N-1)/N of lm_head but add an all-gather of the logits to every
                   step; at the tiny models' 512 words (and SmolLM2's 49,152 x 576,
                   a tenth of its weights) the replicated head is the simpler choice.

The all-reduce is in the programs, not between them: torch.export traces
torch.ops._c10d_functional.all_reduce/wait_tensor as two graph nodes naming the
process group ("0", the default group, in the builder's one-rank export group and in
each rank's group alike), and Inductor compiles them as extern calls with the CPU (gloo)
and CUDA (NCCL) process groups (measured on this 2-core host, torch 2.13: exported,
loaded and compiled in two gloo ranks, logits within 5e-7 of the unsplit product, and
Inductor's FX-graph cache hits on a second load). So the programs need no splitting
into segments, and the runtime does no collective of its own.

Every rank's shard has the same shapes, so the programs are the same for every rank:
the engine carries one program set and N weight files (weights.rank<r>.safetensors),
and a rank reads its own member only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

# (module, linear) pairs of a Llama-shaped decoder layer, by how they are split.
HEADS = (
    ("self_attn", "q_proj", "heads"),
    ("self_attn", "k_proj", "kv"),
    ("self_attn", "v_proj", "kv"),
)
ROWS = (("mlp", "gate_proj"), ("mlp", "up_proj"))
COLUMNS = (("self_attn", "o_proj", "heads"), ("mlp", "down_proj", "mlp"))


def geometry(config: dict[str, Any]) -> dict[str, int]:
    """The counts a split divides, from a config.json (a text config nested under
    text_config counts as the model's)."""
    text = config.get("text_config") or config
    heads = int(text.get("num_attention_heads") or 0)
    return {
        "num_attention_heads": heads,
        "num_key_value_heads": int(text.get("num_key_value_heads") or heads),
        "intermediate_size": int(text.get("intermediate_size") or 0),
    }


def indivisible(config: dict[str, Any], world: int) -> list[str]:
    """`name count` of each count the split divides that `world` does not divide."""
    return [f"{k} {v}" for k, v in geometry(config).items() if v % world or v == 0]


def layers(model: Any) -> list[Any]:
    """The model's decoder layers, each Llama-shaped (self_attn q/k/v/o and mlp
    gate/up/down, all plain torch.nn.Linear); raises ValueError naming what is not."""
    import torch

    found = getattr(getattr(model, "model", None), "layers", None)
    if found is None:
        raise ValueError(f"{type(model).__name__} has no model.layers to split")
    wanted = [(m, n) for m, n, _ in HEADS] + list(ROWS) + [(m, n) for m, n, _ in COLUMNS]
    for i, layer in enumerate(found):
        for owner, name in wanted:
            linear = getattr(getattr(layer, owner, None), name, None)
            if type(linear) is not torch.nn.Linear:
                raise ValueError(
                    f"layer {i} of {type(model).__name__} has no plain {owner}.{name} "
                    f"Linear to split (found {type(linear).__name__})"
                )
    return list(found)


def split(model: Any, rank: int, world: int) -> None:
    """The model's weights cut to rank `rank` of `world`, in place (module docstring)."""
    config = model.config.get_text_config()
    bad = indivisible(config.to_dict(), world)
    if bad:  # what `doit check` refuses where it has the config.json
        raise ValueError(
            f"it does not divide {', '.join(bad)}: every rank must hold whole heads "
            "and an equal share of the MLP"
        )
    heads = config.num_attention_heads
    counts = {
        "heads": heads,
        "kv": getattr(config, "num_key_value_heads", None) or heads,
        "mlp": config.intermediate_size,
    }
    for layer in layers(model):
        for owner, name, count in HEADS:
            _cut(getattr(layer, owner), name, 0, counts[count], rank, world)
        for owner, name in ROWS:
            _cut(getattr(layer, owner), name, 0, counts["mlp"], rank, world)
        for owner, name, count in COLUMNS:
            _cut(getattr(layer, owner), name, 1, counts[count], rank, world)
        attn = layer.self_attn
        for attr, count in (("num_heads", "heads"), ("num_key_value_heads", "kv")):
            if isinstance(getattr(attn, attr, None), int):
                setattr(attn, attr, counts[count] // world)


# The split parameters' last two name parts, once q/k/v and gate/up are fused
# (builders/common/siblings.py): a row-parallel layer's bias is whole on rank 0.
SPLIT = {
    (m, p)
    for m in ("qkv_proj", "gate_up_proj", "q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
    for p in ("weight", "bias")
}
SPLIT |= {("o_proj", "weight"), ("down_proj", "weight")}


def split_names(names: list[str]) -> list[str]:
    """The parameters among `names` that are split across the ranks."""
    return [n for n in names if tuple(n.split(".")[-2:]) in SPLIT]


def _cut(module: Any, name: str, axis: int, units: int, rank: int, world: int) -> None:
    """module.<name> (a Linear) replaced by rank `rank`'s part: rows (axis 0, with its
    bias) or columns (axis 1; the bias on rank 0 only, as the partial sums add it once)
    of `units` equal groups (heads of head_dim, or intermediate channels)."""
    import torch

    linear = getattr(module, name)
    width = linear.weight.shape[axis] // units
    share = units // world * width
    part = slice(rank * share, (rank + 1) * share)
    weight = linear.weight.detach()[part] if axis == 0 else linear.weight.detach()[:, part]
    bias = linear.bias
    if bias is not None:
        bias = bias.detach()[part] if axis == 0 else bias.detach() * (rank == 0)
    made = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    made.to(dtype=weight.dtype)
    with torch.no_grad():
        made.weight.copy_(weight.contiguous())
        if bias is not None:
            made.bias.copy_(bias.contiguous())
    made.requires_grad_(False)
    setattr(module, name, made)


def reduce_rows(model: Any, group: str) -> int:
    """An all-reduce (sum over the ranks) of each row-parallel layer's output, as a
    forward hook, traced into the programs; the layers hooked."""
    import torch

    def hook(module: Any, args: Any, out: Any) -> Any:
        reduced = torch.ops._c10d_functional.all_reduce(out, "sum", group)
        return torch.ops._c10d_functional.wait_tensor(reduced)

    count = 0
    for layer in layers(model):
        for owner, name, _ in COLUMNS:
            getattr(getattr(layer, owner), name).register_forward_hook(hook)
            count += 1
    return count


@contextlib.contextmanager
def export_group() -> Iterator[str]:
    """A one-rank gloo process group for torch.export to trace the collectives against
    (an in-memory store: no port is opened); its name, which each rank's default group
    has too. A group the process already has is used as it is."""
    import torch.distributed as dist

    made = not dist.is_initialized()
    if made:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield str(dist.group.WORLD.group_name)
    finally:
        if made:
            dist.destroy_process_group()


def rank_entries(entries: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    """The cache entries of one rank: each key/value tensor holds kv_heads/world heads."""
    return [
        {**e, "shape": [e["shape"][0], e["shape"][1] // world, *e["shape"][2:]]} for e in entries
    ]
