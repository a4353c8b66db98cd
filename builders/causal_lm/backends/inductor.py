"""inductor: portable torch.export programs over a static KV cache, which runtime/
compiles with Inductor (and, on CUDA, replays in a CUDA graph).

The engine is one uncompressed zip and its weights beside it, as plain safetensors
files that a load maps rather than reads (the bundle step links all of them):
  decode.pt2           torch.export.save of one token's step
  decode_one.pt2       the same step over one row (build.decode_batch_one; by default
                       on GPU targets with max_batch_size > 1), which generation at batch
                       1 runs over the first row of the same cache: the max-batch step
                       reads every row's cache at every step, and at Qwen3-8B's
                       geometry on the H100 a batch-1 step cost what a batch-8 step did
                       (9.15 ms, 8 x 512 cache positions a layer: bench/results/
                       gpu_8b_2026-12-07.txt)
  prefill.pt2          the same step over build.prefill_chunk_len tokens (when > 0)
  verify.pt2           the same step over verify_len tokens: a drafting variant's verify
                       forward (the last token and max_draft_len drafts), when set
  draft.pt2, markov.pt2
                       a DFlash/DSpark drafter's programs (build.drafter; backends/
                       _drafter.py), whose target programs also return the hidden states
                       it reads
  weights.safetensors  (beside the zip, not in it) the parameters once, in the engine's
                       dtype; with build.tensor_parallel N, weights.rank<r>.safetensors
                       instead, rank r's shard (backends/_shards.py: column-parallel
                       q/k/v and gate/up, row-parallel o and down, an all-reduce in the
                       programs after each row-parallel layer, the output projection
                       replicated)
  program.json         what the runtime needs: names, dtype, shapes, chunk length, the
                       weights files' CRC-32s (and for
                       an image-text-to-text engine the prefill's image_features shape:
                       backends/_images.py)
  kernels/, kernels.json
                       the programs compiled (and on CUDA autotuned) on the build host,
                       as Inductor's cache, with that host's key: a load compiles nothing
                       (runtime/kernels.py; made by backends/_kernels.py)

Each program takes (weights..., input_ids [B, T], position_ids [B, T], slots [T],
attention_mask [B, max_seq_len], *cache) and returns logits [B, T, vocab] in fp32; the
cache tensors [B, kv_heads, max_seq_len, head_dim] are updated in place at `slots`.
The weights are program inputs, not constants, so both programs read one copy in
memory (the runtime passes the same tensors to every program). Shapes are static (B is
max_batch_size): static shapes are what a CUDA graph replays.

Projections that read one input run as one matmul: a layer's q/k/v projections and
its MLP's gate/up projections are concatenated here, once, into one weight each
(`qkv_proj`, `gate_up_proj`), and the programs slice the product. At batch 1 each
matrix-vector product is a kernel of its own on the GPU, so this takes three kernels
a layer out of every step; the math per output element is unchanged.

fp8 (precision.weights fp8, GPU targets of sm89+): the quantize step's modelopt
calibration (FP8_DEFAULT_CFG: one amax per weight and per input of each Linear) becomes
real fp8 matrix multiplies. Each calibrated Linear is replaced by `Fp8Linear`: its
weight stored in float8_e4m3fn at scale amax/448, its input quantized at the input's
calibrated scale on the way in, and the product taken by torch._scaled_mm (the fp8
tensor cores) with both scales, out in the compute dtype. That is the arithmetic
modelopt's fake quantization simulates. A fused group (q/k/v, gate/up) keeps each
member's weight scale on its own output rows (row-wise scaling), so its quantized
values are the members'. Layers modelopt leaves unquantized (lm_head) stay in the
compute dtype.

Attention is sdpa (torch's fused scaled_dot_product_attention) over the key/value
heads themselves (`grouped_sdpa`): with grouped-query attention, each KV head's group of
query heads becomes one head's rows, so the cache is never expanded to every query head
(transformers' sdpa path repeats it, two copy kernels a layer per step). The mask is built
here as a 4-D additive tensor (a slot is visible when it is real and
not after the query's slot; a query always sees its own slot, so a padded row never
attends to nothing and fills the cache with NaN), so transformers' mask code, which
differs between 5.17 (the H200 host) and 5.24, is not traced.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import zipfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

from builders.causal_lm.backends import Options as BaseOptions
from builders.causal_lm.backends import _images, _shards

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# the weights files, written beside engine.zip (its other members are in it)
WEIGHTS = re.compile(r"weights(\.rank\d+)?\.safetensors")
# The CPU flags that give Inductor's CPU backend native arithmetic in a half dtype;
# without them each op converts to fp32 and back, slower than fp32 itself.
CPU_FLAGS = {"fp16": ("avx512_fp16", "amx_fp16"), "bf16": ("avx512_bf16", "amx_bf16")}


class Options(BaseOptions):
    backend: str = Field(pattern="^inductor$", description="Engine backend.")
    compute: str = Field(pattern="^(fp32|fp16|bf16)$", description="Compute and KV-cache dtype.")
    prefill_chunk_len: int = Field(
        ge=0, description="Tokens per prefill program call; 0: token-by-token prefill."
    )
    compile_mode: str | None = Field(
        None,
        pattern="^(default|reduce-overhead|max-autotune)$",
        description="The decode step's torch.compile mode (program.json); unset: the runtime's.",
    )
    verify_len: int = Field(
        0,
        ge=0,
        description="Tokens of the verify program (max_draft_len + 1) for a drafting "
        "variant; 0: none.",
    )
    tensor_parallel: int = Field(
        1,
        ge=1,
        description="Ranks the weights are split across (backends/_shards.py); 1: unsplit.",
    )
    decode_batch_one: bool = Field(
        False,
        description="Also a decode program of one row (kiln/plan decode_batch_one "
        "resolves the recipe's setting).",
    )
    drafter: str = Field(
        "none",
        pattern="^(none|dflash|dspark)$",
        description="The drafter (input 'drafter', its checkpoint) whose programs the engine "
        "also holds, its target programs returning the hidden states it reads "
        "(backends/_drafter.py); 'none': no drafter.",
    )


def build(request: Request, writer: Writer) -> None:
    import torch

    from builders.causal_lm.backends._kernels import compile_kernels
    from builders.causal_lm.export import value_info

    opts = Options.model_validate(request.options)
    device = _device(request, opts)
    files, meta, entries = engine_files(request, opts, device)
    engine = {
        "backend": "inductor",
        "version": torch.__version__,
        "provider": device,
        "file": "engine.zip",
        "max_batch_size": opts.max_batch_size,
        "max_seq_len": opts.max_seq_len,
        **({"tensor_parallel": opts.tensor_parallel} if opts.tensor_parallel > 1 else {}),
    }
    if device == "cuda":
        torch.cuda.empty_cache()  # the export's model is gone; the compile runs beside
    engine["kernels"] = compile_kernels(request, files, engine, writer)
    info = value_info(entries)
    if "image_token_id" in meta:  # the prefill program's image_features (_images.py)
        shape = ["rows", "hidden"]
        info["inputs"].append({"name": "image_features", "dtype": "float32", "shape": shape})
        info["inputs"].append({"name": "image_rows", "dtype": "int64", "shape": []})
    writer.write_json("io.json", {**meta, **info})
    writer.write_json("engine.json", engine)


def engine_files(
    request: Request, opts: Options, device: str
) -> tuple[dict[str, bytes], dict[str, Any], list[dict[str, Any]]]:
    """The engine zip's members for `device` (which `build` has checked this host
    runs), the model's description for io.json, and its cache entries."""
    import torch

    from builders.causal_lm import _cache
    from builders.causal_lm.backends import _drafter
    from builders.causal_lm.export import describe
    from builders.common.hf import auto_class, load_for_export
    from builders.common.ort import check_limits

    dtype = getattr(torch, DTYPES[opts.compute])
    if opts.drafter != "none" and opts.tensor_parallel > 1:  # buildable.py refuses it first
        raise request.error(
            f"a {opts.drafter} drafter on a tensor-parallel engine", "build it unsplit"
        )
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    model = load_for_export(checkpoint, auto_class(opts.task))
    token = _images.image_token(request, model) if opts.task == "image-text-to-text" else None
    axes = 1 if token is None else _images.position_axes(model)  # 3: M-RoPE's (t, h, w)
    quantized = request.inputs.get("quantized")
    if quantized is not None:
        converted = _fp8_linears(model, checkpoint, quantized)
        request.log(f"{converted} calibrated Linear layers as fp8 matrix multiplies")
    # sdpa: one fused attention kernel per layer where eager attention runs five; the
    # program's 4-D additive mask goes to it unchanged, so the math is the same.
    model.set_attn_implementation(_register_attention())
    drafter = _drafter.modules(request, opts.drafter, model) if opts.drafter != "none" else None
    points, seen = _drafter.capture(request, opts.drafter, model)
    entries = _cache.observe(request, model)
    meta = describe(model, entries)
    check_limits(request, opts.max_seq_len, meta)
    meta["kv_cache"]["dtype"] = DTYPES[opts.compute]
    if token is not None:  # what bundle.json's vision reads of the decoder (bundle.py)
        meta |= {"image_token_id": token, "image_attention": "causal"}
        meta |= {"position_axes": 3} if axes == 3 else {}
    if drafter is not None:  # what bundle.json's drafter reads (bundle.py)
        meta |= {"hidden": points, "drafter": {"kind": opts.drafter, "mask_token_id": drafter[2]}}
    world = opts.tensor_parallel
    ranked = entries if world == 1 else _shards.rank_entries(entries, world)
    with contextlib.nullcontext("") if world == 1 else _shards.export_group() as group:
        if world > 1:
            _split(request, model, 0, world)
            hooked = _shards.reduce_rows(model, group)
            request.log(f"rank 0 of {world}: {hooked} row-parallel outputs all-reduced")
        names, weights = _prepared(request, model, device, dtype)
        if dtype != torch.float32 and device == "cuda":
            fp32_logits(model)
        images = None
        if token is not None:
            names, weights = _images.text_weights(model, names, weights)
            merging = _step_module(model, names, ranked, token)
            images = (merging, _images.feature_width(model), axes)
        step = _step_module(model, names, ranked, hidden=(points, seen))
        files = _programs(request, step, ranked, weights, opts, device, dtype, images)
    drafting: dict[str, Any] = {}  # program.json's "drafter"; its weights stored beside
    mine: list[str] = []
    tensors: list[Any] = []
    if drafter is not None:
        made, mine, tensors, drafting = _drafter.programs(
            request,
            drafter[0],
            drafter[1],
            opts.verify_len,
            opts.drafter,
            opts.max_seq_len,
            device,
            dtype,
        )
        files |= made
    if world == 1:
        files["weights.safetensors"] = _safetensors([*names, *mine], [*weights, *tensors])
    else:
        files["weights.rank0.safetensors"] = _safetensors(names, weights)
        del model, weights, step
        for rank in range(1, world):
            other = load_for_export(checkpoint)
            _split(request, other, rank, world)
            mine, shard = _prepared(request, other, device, dtype)
            if mine != names:
                raise request.error(
                    f"rank {rank}'s parameters differ from rank 0's", "a kiln bug: report it"
                )
            files[f"weights.rank{rank}.safetensors"] = _safetensors(names, shard)
            del other, shard
    program_meta = {
        "weights": names,
        "dtype": DTYPES[opts.compute],
        "batch": opts.max_batch_size,
        "max_seq_len": opts.max_seq_len,
        "prefill_chunk_len": opts.prefill_chunk_len,
        "cache": [
            [opts.max_batch_size, e["shape"][1], opts.max_seq_len, e["shape"][3]] for e in ranked
        ],
        "vocab_size": meta["vocab_size"],
        **({"verify_len": opts.verify_len} if opts.verify_len else {}),
        **({"decode_batch_one": True} if "decode_one.pt2" in files else {}),
        **({"compile_mode": opts.compile_mode} if opts.compile_mode else {}),
        **({"drafter": drafting} if drafting else {}),
    }
    if token is not None:  # the prefill program's last input (_images.py)
        rows = opts.max_batch_size * opts.prefill_chunk_len
        program_meta["image_features"] = [rows, _images.feature_width(model)]
        program_meta["image_rows"] = True  # and how many of them are the chunk's
        program_meta |= {"position_axes": 3} if axes == 3 else {}
    if world > 1:  # the ranks' group, as the programs name it, and what each holds part of
        program_meta |= {
            "tensor_parallel": world,
            "group": group,
            "split": _shards.split_names(names),
        }
    # the weights files' CRC-32s, which every load checks (runtime/inductor.py)
    crcs = {n: zlib.crc32(b) for n, b in files.items() if WEIGHTS.fullmatch(n)}
    program_meta["weights_crc32"] = crcs
    files["program.json"] = json.dumps(program_meta, sort_keys=True, indent=1).encode()
    return files, meta, entries


def _prepared(request: Request, model: Any, device: str, dtype: Any) -> tuple[list[str], list[Any]]:
    """The model's siblings fused, cast, fp8 layers frozen; its parameter names and
    tensors, the programs' weight inputs."""
    from builders.common import siblings

    fused = siblings.fuse(model, special=_fp8_class())
    if fused:
        request.log(f"{fused} groups of projections fused into one matmul each")
    model.to(device=device, dtype=dtype)
    for module in model.modules():
        if isinstance(module, _fp8_class()):
            module.freeze(device)
    return _weights(model)


def fp32_logits(model: Any) -> None:
    """A half-precision engine's output projection takes its bf16/fp16 input and weight,
    returns fp32 logits on CUDA (TensorRT-LLM's logits_dtype float32): rounded to
    bf16, logits near 25 are 0.125 apart, so two candidates within that of each other
    tie and argmax takes the lower id whatever the network computed. SmolLM2-135M-
    Instruct's first answer token to the capital question is such a pair: 'The' over 'L'
    (id 60) by 0.082 in fp32 (bench/probes/first_token_margin.py); its bf16 bundle
    answered "L'Étoile, ..." on the H100 in every run. What follows the projection in
    the model's forward (Gemma's final softcapping) runs in fp32 too. CPU engines keep
    the model's own projection (below). Measured on the H100, torch 2.11
    (bench/probes/fp32_logits.py, bench/results/fp32_logits_2026-12-06.txt):
    - more rows (prefill chunks, batched decode steps): one bf16/fp16 matmul whose
      fp32 accumulator is its output (mm's out_dtype): 1.04-1.15x the bf16 head's
      time; the casts cost 2.0x at 8 rows and 2.8-5.5x at 128.
    - one row (a decode step at batch 1): the same matmul over the row twice, the
      first row's output kept. The casts to fp32, which this form replaced, are fused
      into the product's reduction by max-autotune, but not with the engine's own
      options (runtime/inductor.py CUDA_OPTIONS: no coordinate-descent tuning): at
      Qwen3-8B's head (151,936 x 4,096) they cost 2,085 us a step, the fp32 weight
      written out and read back (597 GB/s of the bf16 weight), against 444 us for two
      rows through mm's out_dtype (2.8 TB/s); the 8B bundle's batch-1 step spent
      2,070 us there (bench/probes/head_rows.py, bench/results/head_rows_2026-12-07.txt).
      One row through out_dtype came back bf16 under max-autotune's own options (an
      Inductor fault; float32 with the engine's), so two rows.
    On CPU mm has no out_dtype and the casts made the decode step's head 6.6-8.2x
    slower on the 2-core host, so CPU engines are left as they were."""
    import torch

    head = model.get_output_embeddings()

    def forward(hidden: Any) -> Any:
        rows = hidden.reshape(-1, hidden.shape[-1])
        if rows.shape[0] == 1:  # one row twice: the docstring says why
            out = torch.mm(rows.expand(2, -1), head.weight.t(), out_dtype=torch.float32)[:1]
        else:
            out = torch.mm(rows, head.weight.t(), out_dtype=torch.float32)
        out = out.reshape(*hidden.shape[:-1], out.shape[-1])
        return out if head.bias is None else out + head.bias.float()

    head.forward = forward


def _programs(
    request: Request,
    step: Any,
    entries: list[dict[str, Any]],
    weights: list[Any],
    opts: Options,
    device: str,
    dtype: Any,
    images: tuple[Any, int, int] | None = None,
) -> dict[str, bytes]:
    """decode.pt2, and decode_one.pt2, prefill.pt2 and verify.pt2 where asked: `step`
    exported (decode_one.pt2 at batch 1, the others at max_batch_size). With
    `images` (the step that takes image features, their width, and the position axes),
    the prefill program is that step, its features [B * T, width] and their count two
    more inputs; with 3 position axes (M-RoPE) every program's positions are [B, T, 3]."""
    import torch

    programs = {"decode.pt2": 1}
    if opts.decode_batch_one and opts.max_batch_size > 1:
        programs["decode_one.pt2"] = 1
    if opts.prefill_chunk_len:
        programs["prefill.pt2"] = opts.prefill_chunk_len
    programs.update(_verify_program(opts))
    files: dict[str, bytes] = {}
    for file, tokens in programs.items():
        batch = 1 if file == "decode_one.pt2" else opts.max_batch_size
        request.log(
            f"torch.export of the {tokens}-token step over {batch} rows for {device} "
            f"({opts.compute})"
        )
        example = _example(entries, weights, opts, tokens, device, dtype, batch)
        if images is not None and images[2] == 3:  # a text token's triple: (p, p, p)
            at = len(weights) + 1
            triples = example[at][..., None].expand(-1, -1, 3).contiguous()
            example = (*example[:at], triples, *example[at + 1 :])
        exported = step
        if images is not None and file == "prefill.pt2":
            exported = images[0]
            rows = opts.max_batch_size * tokens
            features = torch.zeros(rows, images[1], dtype=dtype, device=device)
            example += (features, torch.tensor(rows, device=device))
        with torch.no_grad():
            program = torch.export.export(exported, example, strict=False)
        program._example_inputs = None  # save would store them: the weights again
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        files[file] = buffer.getvalue()
    return files


def _split(request: Request, model: Any, rank: int, world: int) -> None:
    """The model cut to rank `rank`'s shard (backends/_shards.py); a model not shaped
    as the split expects is refused, naming what differs."""
    try:
        _shards.split(model, rank, world)
    except ValueError as exc:
        raise request.error(
            f"tensor_parallel {world}: {exc}",
            "set build.tensor_parallel to one that divides the heads, the key/value heads "
            "and the intermediate size, or to 1; the split knows Llama-shaped decoder "
            "layers (Llama, Qwen2, Qwen3, Mistral)",
        ) from None


def _verify_program(opts: Options) -> dict[str, int]:
    """verify.pt2 and its length, for a drafting variant; none when the prefill program
    already has that length (the runtime then verifies through it) or there is no
    verify_len (program.json then has none, and the runtime verifies token by token)."""
    if opts.verify_len <= 1 or opts.verify_len == opts.prefill_chunk_len:
        return {}
    return {"verify.pt2": opts.verify_len}


def _device(request: Request, opts: Options) -> str:
    """cpu, or cuda for an sm target; a precision or device this host cannot run well
    is unsupported here, with the reason."""
    import torch

    if opts.quantized:
        done = json.loads((request.inputs["quantized"] / "quantize.json").read_text())
        if done["weights"] != "fp8":
            raise request.unsupported(
                f"the inductor backend builds fp8 weights (torch._scaled_mm) and no other "
                f"quantized precision: it has no {done['weights']} matrix multiply; build "
                f"{done['weights']} with the onnxruntime backend"
            )
        if done["kv_cache"] != "auto":
            raise request.unsupported(
                "the inductor backend keeps its KV cache in the compute dtype; an fp8 KV "
                "cache is built by the onnxruntime backend"
            )
        if opts.target == "cpu":
            raise request.unsupported(
                "fp8 matrix multiplies (torch._scaled_mm) run on the fp8 tensor cores of "
                "GPUs of sm89+; this recipe targets cpu"
            )
    if opts.target == "cpu":
        if opts.compute != "fp32":
            from runtime.kernels import cpu_flags

            flags = cpu_flags()
            if not any(f in flags for f in CPU_FLAGS[opts.compute]):
                raise request.unsupported(
                    f"{opts.compute} on this CPU has no native arithmetic (none of "
                    f"{', '.join(CPU_FLAGS[opts.compute])} in /proc/cpuinfo): Inductor would "
                    "convert every op through fp32, slower than fp32; build it for a GPU target"
                )
        return "cpu"
    if not torch.cuda.is_available():
        raise request.unsupported(
            f"inductor for {opts.target} needs a CUDA device; this host has none"
        )
    major, minor = torch.cuda.get_device_capability()
    want = int(opts.target.removeprefix("sm"))
    if major * 10 + minor != want:
        raise request.unsupported(
            f"the recipe targets {opts.target}; this host's GPU is sm{major}{minor}"
        )
    if opts.quantized and (major, minor) < (8, 9):
        raise request.unsupported(
            f"fp8 matrix multiplies (torch._scaled_mm) need sm89+; this GPU is sm{major}{minor}"
        )
    return "cuda"


def _weights(model: Any) -> tuple[list[str], list[Any]]:
    """The parameters, tied ones once (named_parameters drops duplicates)."""
    named = list(model.named_parameters())
    return [n for n, _ in named], [p.detach() for _, p in named]


# grouped_sdpa's name in transformers' registry.
ATTENTION = "kiln_grouped_sdpa"


def _register_attention() -> str:
    """grouped_sdpa in transformers' attention registry (and sdpa's mask builder under
    its name, which the programs' ready 4-D mask bypasses); the name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(ATTENTION, grouped_sdpa)
    AttentionMaskInterface.register(ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    return ATTENTION


def grouped_sdpa(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """sdpa with grouped-query attention folded into the rows: query [B, H, T, D] with H
    = KV heads x G becomes [B, KV heads, G*T, D] (query head h = kv*G + g reads KV head
    kv, as transformers' repeat_kv pairs them), the mask [B, 1, T, S] is repeated for
    the G row groups, and the output is unfolded to transformers' [B, T, H, D]. Each
    score is the same dot product of the same vectors. Every dtype and device folds:
    fp16/bf16 decode steps on CUDA once took sdpa's own enable_gqa for cuDNN's split-KV
    decode kernel (about 6 us a layer against 17.5 folded, on the H200), whose output
    varied from call to call on the H100 (bench/results/gpu_determinism_2026-12-06b.txt;
    the decode step's attention is the math backend now, runtime/inductor.py
    DECODE_ATTENTION). Anything else (a per-head mask, softcapping, attention sinks,
    dropout) goes to transformers' own sdpa."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    groups = int(getattr(module, "num_key_value_groups", 1))
    usual = attention_mask is not None and attention_mask.shape[1] == 1 and dropout == 0.0
    if groups == 1 or not usual or any(kwargs.get(k) is not None for k in ("softcap", "s_aux")):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    b, heads, t, d = query.shape
    rows = query.reshape(b, heads // groups, groups * t, d)
    mb, _, _, s = attention_mask.shape
    mask = attention_mask[:, :, None].expand(mb, 1, groups, t, s).reshape(mb, 1, groups * t, s)
    out = torch.nn.functional.scaled_dot_product_attention(
        rows, key, value, attn_mask=mask, scale=scaling
    )
    return out.reshape(b, heads, t, value.shape[-1]).transpose(1, 2).contiguous(), None


FP8_MAX = 448.0  # float8_e4m3fn's largest finite value


def _fp8_linears(model: Any, checkpoint: Path, quantized: Path) -> int:
    """Every Linear modelopt calibrated (enabled weight and input quantizers) replaced
    by an Fp8Linear of its fp32 weight and the two amaxes. The calibration is read off
    a weightless copy of the model (meta device) with modelopt's quantizers restored on
    it, so the engine's model holds no modelopt module and the host no second copy of
    the weights. The layers converted."""
    from builders.common.hf import calibration_of

    calibrated = calibration_of(checkpoint, quantized)
    amax = {}
    for name, module in calibrated.named_modules():
        w, x = (getattr(module, q, None) for q in ("weight_quantizer", "input_quantizer"))
        if w is not None and x is not None and w.is_enabled and x.is_enabled:
            amax[name] = (float(w.amax), float(x.amax))
    Fp8Linear = _fp8_class()
    layers = dict(model.named_modules())
    for name, (w_amax, x_amax) in amax.items():
        layer = layers[name]
        parent, _, child = name.rpartition(".")
        fp8 = Fp8Linear(layer.weight, layer.bias, w_amax, x_amax)
        setattr(layers[parent] if parent else model, child, fp8.eval())
    return len(amax)


@functools.cache
def _fp8_class() -> Any:
    import torch

    class Fp8Linear(torch.nn.Module):
        """y = x W^T + b as torch._scaled_mm: x quantized to float8_e4m3fn at
        input_amax/448, W stored quantized at its weight amax/448, the product in fp8
        with fp32 accumulation, out in x's dtype. A fused layer keeps each part's own
        weight scale, one per output row (_scaled_mm's row-wise scaling), so fusing
        changes no quantized value. Until `freeze` it keeps the fp32 weight (not a
        parameter, so casting the model leaves it fp32); freeze puts the fp8 weight
        and the scales among the parameters, the engine's inputs."""

        def __init__(
            self, weight: Any, bias: Any, weight_amax: float | list[float], input_amax: float
        ) -> None:
            super().__init__()
            object.__setattr__(self, "master", weight.detach().float())
            self.out_features, self.in_features = weight.shape
            self.bias = None if bias is None else torch.nn.Parameter(bias.detach(), False)
            rows = weight.shape[0]
            self.row_amax = weight_amax if isinstance(weight_amax, list) else [weight_amax] * rows
            self.input_amax = input_amax

        @classmethod
        def fuse(cls, layers: list[Any]) -> Any:
            """One layer over the parts' concatenated weights and row scales; their
            input is one tensor, so their input amaxes agree (the largest is kept)."""
            bias = None
            if layers[0].bias is not None:
                bias = torch.cat([x.bias.detach() for x in layers])
            weight = torch.cat([x.master for x in layers])
            rows = [a for x in layers for a in x.row_amax]
            return cls(weight, bias, rows, max(x.input_amax for x in layers))

        def freeze(self, device: Any) -> None:
            master = object.__getattribute__(self, "master").to(device)
            scale = torch.tensor(self.row_amax, dtype=torch.float32, device=device)
            scale = scale.clamp(min=1e-12) / FP8_MAX
            self.rowwise = bool((scale != scale[0]).any())
            q = (master / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            self.weight = torch.nn.Parameter(q, requires_grad=False)
            w_scale = scale[None, :] if self.rowwise else scale[0]
            self.weight_scale = torch.nn.Parameter(w_scale.contiguous(), False)
            x_scale = max(self.input_amax, 1e-12) / FP8_MAX
            self.input_scale = torch.nn.Parameter(
                torch.tensor(x_scale, dtype=torch.float32, device=device), False
            )
            object.__setattr__(self, "master", None)

        def forward(self, x: Any) -> Any:
            master = object.__getattribute__(self, "master")
            if master is not None:  # before freeze (the cache's shapes are observed)
                return torch.nn.functional.linear(x, master.to(x), self.bias)
            rows = x.reshape(-1, self.in_features)
            q = (rows.float() / self.input_scale).clamp(-FP8_MAX, FP8_MAX)
            scale_a = self.input_scale
            if self.rowwise:  # row-wise takes [M, 1] and [1, N] scales
                scale_a = scale_a.reshape(1, 1).expand(rows.shape[0], 1).contiguous()
            out = torch._scaled_mm(
                q.to(torch.float8_e4m3fn),
                self.weight.t(),
                scale_a=scale_a,
                scale_b=self.weight_scale,
                out_dtype=x.dtype,
            )
            if self.bias is not None:
                out = out + self.bias
            return out.reshape(*x.shape[:-1], self.out_features)

    return Fp8Linear


class _StaticCache:
    """What transformers' attention layers call on a cache (`update`), over the step's
    own cache tensors: writes the new keys and values at `slots`, in place, and returns
    the whole static cache. The 4-D mask hides every slot not yet written."""

    def __init__(self, tensors: tuple[Any, ...], slots: Any) -> None:
        self.tensors, self.slots = tensors, slots
        self.is_compileable = True

    def update(self, key: Any, value: Any, layer_idx: int, *args: Any, **kwargs: Any) -> Any:
        k, v = self.tensors[2 * layer_idx], self.tensors[2 * layer_idx + 1]
        k.index_copy_(2, self.slots, key)
        v.index_copy_(2, self.slots, value)
        return k, v

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return 0

    def __len__(self) -> int:
        return len(self.tensors) // 2


def _step_module(
    model: Any,
    names: list[str],
    entries: list[dict[str, Any]],
    image_token: int | None = None,
    hidden: tuple[list[str], dict[str, Any]] | None = None,
) -> Any:
    """The program's step over `model`; with `image_token`, its last input is image
    features merged at that token (backends/_images.py); with `hidden` (capture points
    and the dict their hooks fill: backends/_drafter.py), it returns (logits, those
    hidden states concatenated) where it has points."""
    import torch

    from builders.common.hf import cache_keyword

    cache_kw = cache_keyword(model)
    count = len(names)
    points, captured = hidden or ([], {})
    wrapped, keys = model, names
    if image_token is not None:
        wrapped = _images.with_images(model, image_token)
        keys = [f"{_images.INNER}.{n}" for n in names]

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # Not a submodule: export would lift its parameters into the program's
            # state_dict, a second copy of the weights the program never reads.
            object.__setattr__(self, "wrapped", wrapped)

        def forward(self, *args: Any) -> Any:
            weights, (ids, positions, slots, visible, *cache) = args[:count], args[count:]
            tokens: dict[str, Any] = {"input_ids": ids}
            if image_token is not None:
                *cache, tokens["image_features"], tokens["image_rows"] = cache
            cols = torch.arange(visible.shape[1], device=ids.device)
            causal = (cols[None, :] <= slots[:, None]) & visible[:, None, :].bool()
            seen = (causal | (cols[None, :] == slots[:, None]))[:, None]  # [B, 1, T, L]
            # Additive, as eager attention adds it (sdpa takes either form).
            low = torch.finfo(weights[0].dtype).min
            mask = torch.where(seen, 0.0, low).to(weights[0].dtype)
            out = torch.func.functional_call(
                self.wrapped,
                dict(zip(keys, weights, strict=True)),
                (),
                {
                    **tokens,
                    "position_ids": positions if positions.dim() == 2 else _mrope(positions),
                    "cache_position": slots,
                    "attention_mask": mask,
                    "use_cache": True,
                    cache_kw: _StaticCache(tuple(cache), slots),
                },
            )
            if points:  # the drafter's features, in the compute dtype
                return out.logits, torch.cat([captured[p] for p in points], dim=-1)
            return out.logits  # fp32 (fp32_logits in half precision)

    return Step().eval()


def _mrope(positions: Any) -> Any:
    """M-RoPE's [B, T, (t, h, w)] positions as transformers takes them, (3, B, T)."""
    return positions.permute(2, 0, 1)


def _example(
    entries: list[dict[str, Any]],
    weights: list[Any],
    opts: Options,
    tokens: int,
    device: str,
    dtype: Any,
    batch: int,
) -> tuple[Any, ...]:
    import torch

    length = opts.max_seq_len
    kw = {"device": device}
    cache = [
        torch.zeros(batch, e["shape"][1], length, e["shape"][3], dtype=dtype, device=device)
        for e in entries
    ]
    return (
        *weights,
        torch.ones(batch, tokens, dtype=torch.long, **kw),
        torch.arange(tokens, **kw).expand(batch, tokens).contiguous(),
        torch.arange(tokens, **kw),
        torch.ones(batch, length, dtype=torch.long, **kw),
        *cache,
    )


def _safetensors(names: list[str], weights: list[Any]) -> bytes:
    from safetensors.torch import save

    return bytes(save({n: w.contiguous().cpu() for n, w in zip(names, weights, strict=True)}))


def write_zip(path: Path, files: dict[str, bytes], append: bool = False) -> None:
    """Stored, not deflated: the runtime reads members without inflating them, and a
    fixed timestamp and name order keep the file a function of its contents. With
    `append`, after the members the file holds (only its central directory is
    rewritten)."""
    with zipfile.ZipFile(path, "a" if append else "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(files):
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), files[name])
