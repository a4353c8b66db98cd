"""runtime/graphs.py: an inductor engine's programs as plain FX graphs, written at
build and read back at every load (issue 39's load time)."""

from __future__ import annotations

import pytest


def test_a_graph_reads_back_node_for_node_and_computes_the_same() -> None:
    import torch

    from runtime import graphs

    table = torch.arange(12.0).reshape(4, 3)

    def step(x: torch.Tensor, ids: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        cache.index_copy_(0, ids, x[:1] * 2)  # an input updated in place, as the KV cache
        y = torch.nn.functional.silu(x @ table.T)
        y = torch.where(y < -9, float("-inf"), y)  # a non-finite constant argument
        return y.to(torch.float64).argmax(-1, keepdim=True) + cache.sum()

    args = [torch.randn(2, 3), torch.tensor([1]), torch.zeros(4, 3)]
    gm = graphs.plain(step, args)
    text, constants = graphs.encode({"step": gm})
    back = graphs.decode(text, constants)["step"]
    assert back.code == gm.code
    assert [n.name for n in back.graph.nodes] == [n.name for n in gm.graph.nodes]
    mine, theirs = [a.clone() for a in args], [a.clone() for a in args]
    assert torch.equal(gm(*mine)[0], back(*theirs)[0])
    assert torch.equal(mine[2], theirs[2]) and mine[2].abs().sum() > 0
    assert graphs.encode({"step": back}) == (text, constants)  # canonical


def test_a_graph_of_another_schema_is_refused_with_the_fix() -> None:
    import json

    from runtime import graphs
    from runtime.format import BundleError

    text = json.dumps({"schema_version": 99, "programs": {}}).encode()
    with pytest.raises(BundleError, match="rebuild the bundle"):
        graphs.decode(text, graphs.encode({})[1])
