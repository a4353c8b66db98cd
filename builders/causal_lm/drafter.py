"""drafter: export a drafter (EAGLE-3, DFlash, DSpark, a checkpoint's MTP module, or
Gemma 4's MTP assistant) to onnxruntime engines, checked against our PyTorch modules
(builders/causal_lm/_drafters.py; the assistant's are transformers', _assistant.py).

Inputs: 'checkpoint' (the drafter's weights; for MTP the model's own checkpoint) and
'target' (the target checkpoint: its embed_tokens / lm_head, which EAGLE-3, DFlash
and MTP share). Outputs, described in drafter.json for the bundle:

  drafter.onnx   the draft layer(s) with an explicit KV cache (runtime/drafters.py)
                 (the assistant's: one step over the target's cached keys and
                 values of the layers drafter.json "target_layers" names)
  fc.onnx        EAGLE-3's fusion of three target layers
  markov.onnx    DSpark's Markov and confidence heads
  d2t.npy        EAGLE-3's draft->target vocabulary offsets, when the vocabularies differ
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

TOLERANCE = 1e-4  # max |onnxruntime - torch| on a fresh example; fp32 noise is ~1e-6


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    variant: str = Field(pattern="^(mtp|eagle3|dflash|dspark)$", description="Drafter kind.")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    task: str = Field(pattern="^text-generation$", description="The recipe's task.")


def read_tensors(checkpoint: Path) -> dict[str, Any]:
    """Every tensor of a (possibly sharded) safetensors checkpoint."""
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for file in sorted(checkpoint.glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


def _load(request: Request, module: Any, state: dict[str, Any], what: str) -> None:
    missing, unexpected = module.load_state_dict(state, strict=False)
    missing = [m for m in missing if not m.endswith("inv_freq")]
    if missing or unexpected:
        raise request.error(
            f"{what}: the checkpoint does not fit kiln's module: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}",
            "check the drafter's architecture and weight names (spec_decoding_facts.md)",
        )


def _head(target: dict[str, Any], config: dict[str, Any]) -> tuple[Any, Any]:
    embed = target["model.embed_tokens.weight"]
    tied = config.get("tie_word_embeddings") and "lm_head.weight" not in target
    return embed, embed if tied else target["lm_head.weight"]


def _export(
    module: Any,
    example: tuple[Any, ...],
    path: Path,
    names: tuple[list[str], list[str]],
    dynamic: dict[str, dict[int, str]],
    opset: int,
) -> None:
    import torch

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes on Python-side shape logic
        torch.onnx.export(
            module,
            example,
            str(path),
            input_names=names[0],
            output_names=names[1],
            dynamic_axes=dynamic,
            opset_version=opset,
            dynamo=False,
        )


def _engine(
    request: Request, module: Any, raw: Path, engine: Path, names: list[str], check: tuple[Any, ...]
) -> None:
    """onnxruntime's offline optimization of `raw` into `engine`, then the engine's
    outputs on `check` against the module's own."""
    import numpy as np
    import onnxruntime as ort
    import torch

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(engine)
    ort.InferenceSession(str(raw), so, providers=["CPUExecutionProvider"])
    session = ort.InferenceSession(str(engine), providers=["CPUExecutionProvider"])
    got = session.run(None, {n: t.numpy() for n, t in zip(names, check, strict=True)})
    with torch.no_grad():
        want = module(*check)
    want = want if isinstance(want, tuple) else (want,)
    worst = max(float(np.abs(g - w.numpy()).max()) for g, w in zip(got, want, strict=True))
    if not worst < TOLERANCE:
        raise request.error(
            f"{engine.name} differs from the torch module by {worst:.2e}",
            "this is a kiln bug in builders/causal_lm/_drafters.py; please report it",
        )
    request.log(f"{engine.name}: max |onnxruntime - torch| {worst:.1e}")
    raw.unlink()


def _chain_io(hidden: int, layers: int = 1) -> tuple[list[str], list[str], dict[str, Any]]:
    del hidden
    kv = [
        f"{k}.{i}.{kind}"
        for k in ("past", "present")
        for i in range(layers)
        for kind in ("key", "value")
    ]
    inputs = ["hidden", "input_ids", "position_ids", "attention_mask", *kv[: 2 * layers]]
    outputs = ["logits", "hidden_out", *kv[2 * layers :]]
    dynamic = {
        "hidden": {1: "seq"},
        "input_ids": {1: "seq"},
        "position_ids": {1: "seq"},
        "attention_mask": {1: "total"},
        "logits": {1: "seq"},
        "hidden_out": {1: "seq"},
        **{n: {2: "past"} for n in kv[: 2 * layers]},
        **{n: {2: "total"} for n in kv[2 * layers :]},
    }
    return inputs, outputs, dynamic


def _chain_example(h: int, kv: list[tuple[int, int]], past: int, seq: int) -> tuple[Any, ...]:
    import torch

    g = torch.Generator().manual_seed(past * 10 + seq)
    return (
        torch.randn(1, seq, h, generator=g),
        torch.randint(0, 64, (1, seq), generator=g),
        torch.arange(past, past + seq)[None],
        torch.ones(1, past + seq, dtype=torch.long),
        *[torch.randn(1, heads, past, dim, generator=g) for heads, dim in kv],
    )


def build_chain(
    request: Request, writer: Writer, opts: Options, module: Any, h: int, kv: list[tuple[int, int]]
) -> None:
    inputs, outputs, dynamic = _chain_io(h)
    raw = writer.path("drafter.raw.onnx")
    _export(module, _chain_example(h, kv, 3, 4), raw, (inputs, outputs), dynamic, opts.opset)
    _engine(request, module, raw, writer.path("drafter.onnx"), inputs, _chain_example(h, kv, 5, 2))


def eagle3(
    request: Request,
    writer: Writer,
    opts: Options,
    cfg: dict[str, Any],
    state: dict[str, Any],
    target: dict[str, Any],
    tcfg: dict[str, Any],
) -> dict[str, Any]:
    import numpy as np
    import torch

    from builders.causal_lm._drafters import Eagle3, Fc

    module = Eagle3(cfg, _head(target, tcfg)[0]).eval()
    own = {k: v for k, v in state.items() if k.split(".")[0] in ("midlayer", "norm", "lm_head")}
    _load(request, module, {**own, "embed.weight": module.embed.weight}, "EAGLE-3")
    heads = cfg["num_key_value_heads"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    build_chain(request, writer, opts, module, cfg["hidden_size"], [(heads, dim)] * 2)
    fc = Fc(state["fc.weight"]).eval()
    width = state["fc.weight"].shape[1]
    ex = (torch.randn(1, 3, width),)
    raw = writer.path("fc.raw.onnx")
    _export(
        fc,
        ex,
        raw,
        (["features"], ["hidden"]),
        {"features": {1: "seq"}, "hidden": {1: "seq"}},
        opts.opset,
    )
    _engine(request, fc, raw, writer.path("fc.onnx"), ["features"], (torch.randn(1, 2, width),))
    meta: dict[str, Any] = {"engines": {"drafter": "drafter.onnx", "drafter_fc": "fc.onnx"}}
    if "d2t" in state:
        np.save(writer.path("d2t.npy"), state["d2t"].numpy().astype(np.int64))
        meta["d2t"] = "d2t.npy"
    return meta


def block_modules(
    request: Request,
    variant: str,
    cfg: dict[str, Any],
    state: dict[str, Any],
    target: dict[str, Any],
    tcfg: dict[str, Any],
) -> tuple[Any, Any, int]:
    """A DFlash/DSpark checkpoint as our modules: the backbone (Block), DSpark's Markov
    and confidence heads (None for DFlash), and the mask token id. The onnxruntime
    export (block, below) and the inductor engine's drafter programs
    (backends/_drafter.py) load it here alike."""
    from builders.causal_lm._drafters import Block, Markov

    dspark = variant == "dspark"
    if dspark:  # frozen copies of the target's embedding and head ship with the drafter
        embed, head = state["embed_tokens.weight"], state["lm_head.weight"]
    else:
        embed, head = _head(target, tcfg)
    cfg = {**cfg, "_context_width": state["fc.weight"].shape[1]}
    module = Block(cfg, embed, head).eval()
    own = {
        k: v for k, v in state.items() if k.split(".")[0] in ("fc", "hidden_norm", "layers", "norm")
    }
    _load(request, module, {**own, "embed.weight": embed, "head.weight": head}, variant)
    mask = int((cfg if dspark else cfg.get("dflash_config") or {})["mask_token_id"])
    if not dspark:
        return module, None, mask
    if cfg.get("markov_head_type", "vanilla") != "vanilla":
        raise request.error(
            f"DSpark markov_head_type {cfg['markov_head_type']!r}",
            "kiln implements the vanilla Markov head only",
        )
    markov = Markov(cfg).eval()
    names = {
        "markov_head.markov_w1.weight": "markov_w1.weight",
        "markov_head.markov_w2.weight": "markov_w2.weight",
        "confidence_head.proj.weight": "proj.weight",
        "confidence_head.proj.bias": "proj.bias",
    }
    _load(request, markov, {v: state[k] for k, v in names.items()}, "DSpark heads")
    return module, markov, mask


def block(
    request: Request,
    writer: Writer,
    opts: Options,
    cfg: dict[str, Any],
    state: dict[str, Any],
    target: dict[str, Any],
    tcfg: dict[str, Any],
) -> dict[str, Any]:
    import torch

    module, markov, mask = block_modules(request, opts.variant, cfg, state, target, tcfg)
    width = state["fc.weight"].shape[1]
    layers = cfg["num_hidden_layers"]
    heads = cfg["num_key_value_heads"]
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    kv = [
        f"{k}.{i}.{kind}"
        for k in ("past", "present")
        for i in range(layers)
        for kind in ("key", "value")
    ]
    inputs = ["context", "context_positions", "block_ids", "block_positions", *kv[: 2 * layers]]
    outputs = ["logits", "hidden_out", *kv[2 * layers :]]
    dynamic = {
        "context": {1: "ctx"},
        "context_positions": {1: "ctx"},
        "block_ids": {1: "block"},
        "block_positions": {1: "block"},
        "logits": {1: "block"},
        "hidden_out": {1: "block"},
        **{n: {2: "past"} for n in kv[: 2 * layers]},
        **{n: {2: "total"} for n in kv[2 * layers :]},
    }

    def example(past: int, ctx: int, size: int) -> tuple[Any, ...]:
        g = torch.Generator().manual_seed(past * 100 + ctx * 10 + size)
        return (
            torch.randn(1, ctx, width, generator=g),
            torch.arange(past, past + ctx)[None],
            torch.randint(0, 64, (1, size), generator=g),
            torch.arange(past + ctx, past + ctx + size)[None],
            *[torch.randn(1, heads, past, dim, generator=g) for _ in range(2 * layers)],
        )

    raw = writer.path("drafter.raw.onnx")
    _export(module, example(3, 2, 4), raw, (inputs, outputs), dynamic, opts.opset)
    _engine(request, module, raw, writer.path("drafter.onnx"), inputs, example(5, 3, 6))
    meta: dict[str, Any] = {"engines": {"drafter": "drafter.onnx"}, "mask_token_id": mask}
    if markov is not None:
        raw = writer.path("markov.raw.onnx")
        h = cfg["hidden_size"]
        _export(
            markov,
            (torch.randn(3, h), torch.randint(0, 64, (3,))),
            raw,
            (["hidden", "prev_ids"], ["bias", "confidence"]),
            {"hidden": {0: "n"}, "prev_ids": {0: "n"}, "bias": {0: "n"}, "confidence": {0: "n"}},
            opts.opset,
        )
        _engine(
            request,
            markov,
            raw,
            writer.path("markov.onnx"),
            ["hidden", "prev_ids"],
            (torch.randn(2, h), torch.randint(0, 64, (2,))),
        )
        meta["engines"]["drafter_markov"] = "markov.onnx"
    return meta


def mtp(
    request: Request, writer: Writer, opts: Options, checkpoint: Path, state: dict[str, Any]
) -> dict[str, Any]:
    import torch
    from transformers import AutoConfig

    from builders.causal_lm._drafters import Mtp

    config = AutoConfig.from_pretrained(checkpoint)
    n = int(getattr(config, "num_nextn_predict_layers", 0) or 0)
    if n < 1:
        raise request.error(
            "the checkpoint has no MTP module (num_nextn_predict_layers is 0)",
            "use the mtp variant with a checkpoint that ships MTP heads",
        )
    config._attn_implementation = "eager"
    config._experts_implementation = "batched_mm"  # the MoE form that traces (FIELD_NOTES)
    prefix = f"model.layers.{config.num_hidden_layers}."
    mine = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    embed = mine.pop("embed_tokens.weight", state["model.embed_tokens.weight"])
    head = mine.pop("shared_head.head.weight", state["lm_head.weight"])
    module = Mtp(config, embed, head).eval()
    renamed = {"embed.weight": embed, "head.weight": head}
    for name, value in mine.items():
        top = name.split(".")[0]
        if top in ("enorm", "hnorm", "eh_proj"):
            renamed[name] = value
        elif name == "shared_head.norm.weight":
            renamed["shared_norm.weight"] = value
        else:
            renamed[f"layer.{name}"] = value
    _load(request, module, renamed, "MTP")
    with torch.no_grad():  # the cache's real shapes, from one forward (FIELD_NOTES)
        _, _, k, v = module(
            torch.zeros(1, 1, config.hidden_size),
            torch.zeros(1, 1, dtype=torch.long),
            torch.zeros(1, 1, dtype=torch.long),
            torch.ones(1, 1, dtype=torch.long),
            None,
            None,
        )
    kv = [(k.shape[1], k.shape[3]), (v.shape[1], v.shape[3])]
    build_chain(request, writer, opts, module, config.hidden_size, kv)
    return {"engines": {"drafter": "drafter.onnx"}, "mtp_layers": n}


ASSISTANT_IO = (
    [
        "input_ids",
        "hidden",
        "position_ids",
        "full_key",
        "full_value",
        "sliding_key",
        "sliding_value",
    ],
    ["logits", "hidden_out"],
)


def _assistant_example(target: Any, length: int) -> tuple[Any, ...]:
    """One step's inputs over `length` target positions: each attention type's keys
    and values shaped as the target's own cache (observed from one forward)."""
    import torch

    g = torch.Generator().manual_seed(length)
    with torch.no_grad():
        out = target(torch.ones(1, length, dtype=torch.long), return_shared_kv_states=True)
    kv = out.shared_kv_states
    shapes = [t.shape for kind in ("full_attention", "sliding_attention") for t in kv[kind]]
    return (
        torch.randint(0, target.config.vocab_size, (1, 1), generator=g),
        torch.randn(1, 1, target.config.hidden_size, generator=g),
        torch.tensor([[length]]),
        *[torch.randn(*shape, generator=g) for shape in shapes],
    )


def assistant(
    request: Request, writer: Writer, opts: Options, checkpoint: Path, target: Path
) -> dict[str, Any]:
    """Gemma 4's MTP assistant, a companion checkpoint (builders/causal_lm/_assistant.py)."""
    from transformers import AutoModelForCausalLM, Gemma4AssistantForCausalLM

    from builders.causal_lm._assistant import AssistantStep, store_layers

    model = AutoModelForCausalLM.from_pretrained(target, attn_implementation="eager").eval()
    helper = Gemma4AssistantForCausalLM.from_pretrained(checkpoint).eval()
    helper.config.get_text_config()._attn_implementation = "eager"
    if helper.config.backbone_hidden_size != model.config.hidden_size:
        raise request.error(
            f"the assistant was trained on a target of width {helper.config.backbone_hidden_size}; "
            f"this target's is {model.config.hidden_size}",
            "pair the assistant with the Gemma 4 checkpoint it was released for",
        )
    if helper.config.use_ordered_embeddings:
        raise request.unsupported(
            "the assistant's head is centroid-masked (use_ordered_embeddings: "
            "Gemma4AssistantMaskedEmbedder scores the top centroid_intermediate_top_k of "
            "num_centroids token clusters and sets every other token below their minimum); "
            "kiln's assistant step exports the plain tied head only"
        )
    embed = model.get_input_embeddings()
    module = AssistantStep(helper, embed.weight.detach(), float(embed.scalar_embed_scale)).eval()
    raw = writer.path("drafter.raw.onnx")
    dynamic = {n: {2: "length"} for n in ASSISTANT_IO[0][3:]}
    _export(module, _assistant_example(model, 5), raw, ASSISTANT_IO, dynamic, opts.opset)
    # checked past the sliding window, where the two attention types see different keys
    check = _assistant_example(model, 3 * module.window)
    _engine(request, module, raw, writer.path("drafter.onnx"), ASSISTANT_IO[0], check)
    return {"engines": {"drafter": "drafter.onnx"}, "target_layers": store_layers(model.config)}


def build(request: Request, writer: Writer) -> None:
    import onnxruntime as ort

    opts = Options.model_validate(request.options)
    ckpt = request.inputs["checkpoint"] / "checkpoint"
    tckpt = request.inputs["target"] / "checkpoint"
    cfg = json.loads((ckpt / "config.json").read_text())
    tcfg = json.loads((tckpt / "config.json").read_text())
    state = read_tensors(ckpt)
    request.log(f"exporting the {opts.variant} drafter to onnxruntime engines")
    if cfg.get("architectures") == ["Gemma4AssistantForCausalLM"]:
        meta = assistant(request, writer, opts, ckpt, tckpt)
    elif opts.variant == "mtp":
        meta = mtp(request, writer, opts, ckpt, state)
    else:
        target = state if ckpt == tckpt else read_tensors(tckpt)
        fn = eagle3 if opts.variant == "eagle3" else block
        meta = fn(request, writer, opts, cfg, state, target, tcfg)
    writer.write_json(
        "drafter.json",
        {
            **meta,
            "kind": opts.variant,
            "backend": "onnxruntime",
            "version": ort.__version__,
            "provider": "CPUExecutionProvider",
            "config": cfg,
        },
    )
