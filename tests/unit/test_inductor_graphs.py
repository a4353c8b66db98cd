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


def test_each_constant_reads_back_on_the_device_it_was_written_from() -> None:
    """safetensors keeps no device: a CUDA program's lifted constant read back on the
    CPU failed every CUDA engine's compile (_assert_tensor_metadata: "Expected: cuda:0,
    Got: cpu", the H100 run of 2026-12-06). graphs.json names each constant's device and
    the load puts it there; this host has no CUDA, so the name is edited to meta."""
    import json

    import torch

    from runtime import graphs

    table = torch.arange(6.0).reshape(2, 3)
    gm = graphs.plain(lambda x: x @ table.T, [torch.randn(1, 3)])
    text, constants = graphs.encode({"step": gm})
    body = json.loads(text)
    assert body["devices"] and set(body["devices"].values()) == {"cpu"}
    body["devices"] = dict.fromkeys(body["devices"], "meta")
    back = graphs.decode(json.dumps(body).encode(), constants)["step"]
    held = [getattr(back, n.target) for n in back.graph.nodes if n.op == "get_attr"]
    assert held and all(t.device.type == "meta" for t in held)
