"""An inductor engine's programs as plain FX graphs (issue 39: a bundle loads in
seconds): what a load hands Inductor (torch._inductor.standalone_compile), without
torch.export's deserializer or Dynamo.

torch.export.load of the SmolLM2-geometry programs took 11 s of a 22 s load on the H100
(its serde: dataclasses rebuilt field by field through typing.get_type_hints), and
Dynamo's trace of the module it gives back another ~8 s
(bench/results/gpu_determinism_2026-12-06.txt; on this CPU host,
bench/results/load_profile_2026-12-06.txt). The compile that makes the engine's kernels
(builders/causal_lm/backends/_kernels.py) derives these graphs from the .pt2 programs
once, writes them into engine.zip, and compiles from them as read back from that
member; every load reads the same member and compiles the same graphs, so Inductor's
caches, keyed by the graph, find the build's kernels.

    graphs.json         {"schema_version", "programs": {name: {"nodes": [...]}}}: each
                        node's op, name, target and arguments, in graph order; a target
                        is an operator's qualified name (aten::mm.default), an argument
                        a JSON value or a tagged one (a node, a dtype, a device, a list)
    graphs.safetensors  the graphs' constant tensors (get_attr targets), "<name>/<attr>";
                        safetensors keeps no device, so graphs.json's "devices" names each
                        one's ({"<name>/<attr>": "cuda:0"}): a CUDA program's lifted
                        constants read back on the CPU fail its _assert_tensor_metadata
                        ("Tensor device mismatch! Expected: cuda:0, Got: cpu")

The decode graphs (decode, and decode_one's one row) are the decode programs with the
greedy bookkeeping (runtime/inductor.py _greedy_step), exported as one function, as
torch.compile used to trace it; each graph is run_decompositions'd (export's inference
IR: functional, with the inputs' in-place updates at its end) and returns a tuple.
"""

from __future__ import annotations

import builtins
import json
import math
import operator
from typing import Any

from runtime.format import BundleError

PROGRAMS = ("decode", "decode_one", "prefill", "verify")  # <name>.pt2 in engine.zip, when built
# the programs with the greedy bookkeeping (runtime/inductor.py _greedy_step)
STEPS = ("decode", "decode_one")
GRAPHS = "graphs.json"
CONSTANTS = "graphs.safetensors"
SCHEMA_VERSION = 1
_PYTHON = {"operator": operator, "builtins": builtins, "math": math}


def encode(graphs: dict[str, Any]) -> tuple[bytes, bytes]:
    """graphs.json and graphs.safetensors for {name: plain GraphModule}."""
    from safetensors.torch import save

    programs, constants, devices = {}, {}, {}
    for name, gm in graphs.items():
        nodes = []
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                tensor = getattr(gm, node.target)
                constants[f"{name}/{node.target}"] = tensor.contiguous()
                devices[f"{name}/{node.target}"] = str(tensor.device)
            nodes.append(
                [node.op, node.name, _target(node), _arg(node.args), _arg(dict(node.kwargs))]
            )
        programs[name] = {"nodes": nodes}
    body = {"schema_version": SCHEMA_VERSION, "programs": programs, "devices": devices}
    return json.dumps(body, sort_keys=True).encode(), save(constants)


def decode(text: bytes, constants: bytes) -> dict[str, Any]:
    """{name: GraphModule} from graphs.json and graphs.safetensors."""
    import torch
    from safetensors.torch import load

    body = json.loads(text)
    if body.get("schema_version") != SCHEMA_VERSION:
        raise BundleError(
            f"{GRAPHS} has schema {body.get('schema_version')}, this kiln reads "
            f"{SCHEMA_VERSION}: rebuild the bundle"
        )
    tensors = load(constants)
    for key, device in body.get("devices", {}).items():
        tensors[key] = tensors[key].to(device)
    out = {}
    for name, program in body["programs"].items():
        graph = torch.fx.Graph()
        nodes: dict[str, Any] = {}
        root = torch.nn.Module()
        for op, node_name, target, args, kwargs in program["nodes"]:
            if op == "get_attr":
                setattr(root, target, tensors[f"{name}/{target}"])
            node = graph.create_node(
                op,
                _resolve(target) if op == "call_function" else target,
                _value(args, nodes),
                _value(kwargs, nodes),
                name=node_name,
            )
            if node.name != node_name:  # graph's own naming would change the code
                raise BundleError(f"{GRAPHS}: node {node_name!r} read back as {node.name!r}")
            nodes[node_name] = node
        out[name] = torch.fx.GraphModule(root, graph)
    return out


def _target(node: Any) -> str:
    import torch

    if node.op != "call_function":
        return str(node.target)
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return "op:" + target.name()  # e.g. aten::mm.default
    module = str(getattr(target, "__module__", ""))
    if module in ("_operator", "operator"):
        module = "operator"
    name = str(getattr(target, "__name__", ""))
    if module not in _PYTHON or getattr(_PYTHON[module], name, None) is not target:
        raise ValueError(f"graph node {node.name}: target {target!r} cannot be written")
    return f"py:{module}.{name}"


def _resolve(target: str) -> Any:
    import torch

    kind, _, name = target.partition(":")
    if kind == "op":
        namespace, _, rest = name.partition("::")
        packet, _, overload = rest.partition(".")
        return getattr(getattr(getattr(torch.ops, namespace), packet), overload or "default")
    if kind == "py":
        module, _, attr = name.partition(".")
        return getattr(_PYTHON[module], attr)
    raise BundleError(f"{GRAPHS}: unknown target {target!r}")


def _arg(value: Any) -> Any:
    """A node argument as JSON: plain values as they are, the rest tagged."""
    import torch

    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, torch.fx.Node):
        return {"node": value.name}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_arg(v) for v in value]}
    if isinstance(value, dict):
        return {"dict": {k: _arg(v) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {"dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"device": str(value)}
    if isinstance(value, torch.layout):
        return {"layout": str(value).removeprefix("torch.")}
    if isinstance(value, torch.memory_format):
        return {"memory_format": str(value).removeprefix("torch.")}
    raise ValueError(f"a graph argument of type {type(value).__name__} cannot be written")


def _value(value: Any, nodes: dict[str, Any]) -> Any:
    import torch

    if not isinstance(value, dict):
        return value
    (tag, inner), *_ = value.items()
    if tag == "node":
        return nodes[inner]
    if tag in ("list", "tuple"):
        items = [_value(v, nodes) for v in inner]
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        return {k: _value(v, nodes) for k, v in inner.items()}
    if tag == "float":
        return float(inner)
    if tag == "device":
        return torch.device(inner)
    if tag in ("dtype", "layout", "memory_format"):
        return getattr(torch, inner)
    raise BundleError(f"{GRAPHS}: unknown argument tag {tag!r}")


def plain(fn: Any, args: list[Any]) -> Any:
    """`fn` over `args` (the engine's own tensors) exported and decomposed to export's
    inference IR, as a plain GraphModule that takes the flat inputs and returns a tuple."""
    import torch

    class Program(torch.nn.Module):
        def forward(self, *inputs: Any) -> Any:
            return fn(*inputs)

    with torch.no_grad():
        exported = torch.export.export(Program(), tuple(args), strict=False)
    decomposed = exported.run_decompositions({})
    try:  # torch 2.13: no input-check hooks, no _guards_fn submodule
        module = decomposed.module(check_guards=False)
    except TypeError:  # a torch whose module() takes no check_guards
        module = decomposed.module()
    for node in list(module.graph.nodes):  # the guards' call, where a torch adds one
        if node.op == "call_module" and node.target == "_guards_fn":
            module.graph.erase_node(node)
    attrs = {n.target: getattr(module, n.target) for n in module.graph.nodes if n.op == "get_attr"}
    gm = torch.fx.GraphModule(attrs, module.graph)
    gm.graph._codegen = torch.fx.graph.CodeGen()  # flat inputs, a tuple out: no pytree specs
    gm.recompile()
    return gm


def derive(
    exported: dict[str, Any], inputs: dict[str, list[Any]], step: Any, attention: Any
) -> tuple[bytes, bytes]:
    """graphs.json and graphs.safetensors from the .pt2 programs (`exported`, by name),
    each over the engine's own `inputs`: the decode programs (STEPS) as `step(module)`
    (the greedy step of runtime/inductor.py), exported under `attention()` (the decode
    step's sdpa backends), the others as they are."""
    out = {}
    for name, program in exported.items():
        if name in STEPS:
            with attention():
                out[name] = plain(step(program.module()), inputs[name])
        else:
            out[name] = plain(program.module(), inputs[name])
    return encode(out)
