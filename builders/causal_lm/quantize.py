"""quantize: calibrate and fake-quantize the torch model with NVIDIA modelopt.

`mtq.quantize(model, config, forward_loop)` inserts quantizers into every Linear
(and, for an fp8 KV cache, into the attention's K/V matmuls), runs the calibration
loop to set their scales (max calibration; SmoothQuant and AWQ-lite search their
own scales), and leaves a fake-quantized model: fp32 tensors that take exactly the
quantized values. quantized.pt holds modelopt's state, the quantizers' scales and any
weight the calibration changed, not the weights the checkpoint holds unchanged
(builders/common/hf.py save_quantized: at 8B those were 33 GB); the export step
restores them onto the checkpoint and exports the Q/DQ graph.

For int4-awq, a layer's q/k/v projections and an MLP's gate and up are calibrated as
one fused linear layer each (builders/common/siblings.py):
AWQ then searches one input scale per group, which folds into the RMSNorm before it,
so the quantized graph multiplies no activations by it and runs one MatMulNBits per
group. quantize.json records the groups fused and the scales folded; the export step
fuses the same groups before it restores the quantizers.

Calibration reads the first `samples` lines of the shipped builders/data/texts/
calibration.txt (hashed into this step's code version), each cut to `max_tokens`.

Measured on CPU (FIELD_NOTES, and again here with modelopt 0.47.0): int8-sq,
int8-wo, fp8, int4-awq and w4a8-awq calibrate on CPU; nvfp4 does not ("amax must
be a CUDA tensor for dynamic block quantization"), so on a host without CUDA the
step ends `unsupported-here` with modelopt's own message.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.data import texts

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

# recipe weights -> modelopt config name (modelopt.torch.quantization.config)
CONFIGS = {
    "fp32": None,
    "int8-sq": "INT8_SMOOTHQUANT_CFG",
    "int8-wo": "INT8_WEIGHT_ONLY_CFG",
    "fp8": "FP8_DEFAULT_CFG",
    "int4-awq": "INT4_AWQ_CFG",
    "w4a8-awq": "W4A8_AWQ_BETA_CFG",
    "nvfp4": "NVFP4_DEFAULT_CFG",
}
NEEDS_CUDA = ("nvfp4",)


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    weights: str = Field(pattern="^(fp32|int8-sq|int8-wo|fp8|int4-awq|w4a8-awq|nvfp4)$")
    kv_cache: str = Field(pattern="^(auto|fp8)$", description="fp8: quantize K and V too.")
    samples: int = Field(ge=1, description="Calibration texts.")
    max_tokens: int = Field(ge=8, description="Tokens per calibration text.")
    task: str = Field(
        pattern="^(text-generation|image-text-to-text)$",
        description="The recipe's task; a vision-language model's language model alone is "
        "quantized (its vision tower and projector stay in fp32).",
    )
    block_size: int | None = Field(
        None, description="Blocked int4 weights: weights per scale along K (else modelopt's)."
    )
    awq_alpha_step: float | None = Field(
        None, description="AWQ-lite's grid step over alpha (else modelopt's)."
    )
    lm_head_outliers: int | None = Field(
        None, ge=1, description="Rank this many lm_head input channels by mean |x|."
    )


def config(
    mtq: Any,
    weights: str,
    kv_cache: str,
    block_size: int | None = None,
    awq_alpha_step: float | None = None,
) -> dict[str, Any]:
    """modelopt's config for the weights, with its FP8_KV_CFG entries for an fp8 cache,
    `block_size` for the weight quantizers that quantize in blocks along K, and
    `awq_alpha_step` for AWQ-lite's search."""
    name = CONFIGS[weights]
    if name is None:  # fp32 weights, fp8 KV cache only: every other quantizer off
        cfg: dict[str, Any] = {"quant_cfg": [{"quantizer_name": "*", "enable": False}]}
        cfg["algorithm"] = "max"
    else:
        cfg = copy.deepcopy(getattr(mtq, name))
    if kv_cache == "fp8":
        cfg["quant_cfg"] = [*cfg["quant_cfg"], *copy.deepcopy(mtq.FP8_KV_CFG["quant_cfg"])]
    if block_size is not None:
        for entry in cfg["quant_cfg"]:
            quantizers = entry.get("cfg")  # W4A8: a list, the int4 stage first
            for q in quantizers if isinstance(quantizers, list) else [quantizers]:
                if entry.get("quantizer_name") == "*weight_quantizer" and -1 in (
                    (q or {}).get("block_sizes") or {}
                ):
                    q["block_sizes"][-1] = block_size
    if awq_alpha_step is not None:
        cfg["algorithm"] = {"method": "awq_lite", "alpha_step": awq_alpha_step}
    return cfg


# A vision-language model's modules that keep their precision: the vision program is
# built from the fp32 checkpoint (builders/vision/), as TensorRT-LLM's VLM recipes keep
# the vision encoder unquantized; quantizers there would only calibrate on text.
VISION_MODULES = ("*vision_tower*", "*multi_modal_projector*")


def language_model_only(cfg: dict[str, Any]) -> dict[str, Any]:
    """`cfg` with every quantizer of the vision modules off (later entries win)."""
    off = [{"quantizer_name": f"{m}", "enable": False} for m in VISION_MODULES]
    return {**cfg, "quant_cfg": [*cfg["quant_cfg"], *off]}


def calibration_ids(tokenizer: Any, samples: int, max_tokens: int) -> list[list[int]]:
    lines = [ln for ln in texts.path("calibration").read_text().splitlines() if ln.strip()]
    chosen = [lines[i % len(lines)] for i in range(samples)]  # repeat when asked for more
    return [tokenizer(t)["input_ids"][:max_tokens] for t in chosen]


def build(request: Request, writer: Writer) -> None:
    import modelopt.torch.quantization as mtq
    import torch
    from transformers import AutoTokenizer

    from builders.common import siblings
    from builders.common.hf import auto_class, load_causal_lm, quiet_stdout, save_quantized

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(0)
    model = load_causal_lm(checkpoint, auto_class(opts.task)).to(device)
    fused = siblings.fuse(model) if opts.weights in siblings.FUSED_PRECISIONS else 0
    calibration = calibration_ids(
        AutoTokenizer.from_pretrained(checkpoint), opts.samples, opts.max_tokens
    )

    def forward_loop(m: Any, texts: list[list[int]] = calibration) -> None:
        with torch.no_grad():
            for ids in request.progress(texts, len(texts), "calibration texts"):
                m(torch.tensor([ids], device=device))

    cfg = config(mtq, opts.weights, opts.kv_cache, opts.block_size, opts.awq_alpha_step)
    if opts.task == "image-text-to-text":
        cfg = language_model_only(cfg)
    request.log(f"{CONFIGS[opts.weights] or 'FP8_KV_CFG'} on {device}, {len(calibration)} texts")
    started = time.monotonic()
    try:
        with quiet_stdout():
            mtq.quantize(model, cfg, forward_loop)
        # the fake-quant model must run here (NVFP4's does not on CPU): one text shows it
        if not opts.lm_head_outliers:
            forward_loop(model, calibration[:1])
    except (AssertionError, RuntimeError, NotImplementedError) as exc:
        if opts.weights in NEEDS_CUDA and not cuda:
            raise request.unsupported(
                f"{opts.weights} calibration needs a CUDA device; this host has none "
                f"(modelopt {mtq.__name__.split('.')[0]}: {type(exc).__name__}: {exc})"
            ) from None
        raise
    seconds = time.monotonic() - started
    folded = siblings.fold_input_scales(model)
    outliers = {}
    if opts.lm_head_outliers:
        outliers = lm_head_outliers(model, calibration, opts.lm_head_outliers, forward_loop)
        request.log(f"lm_head input channels of largest mean |x|: {outliers['channels']}")
    if fused:
        request.log(f"{fused} sibling groups calibrated fused; {folded} input scales folded")
    model.to("cpu")
    if cuda:  # the calibrated model's blocks (33 GB at 8B) back to the driver, for the
        torch.cuda.empty_cache()  # later steps' own processes (the engine's compile)
    kept = save_quantized(model, checkpoint, writer.path("quantized.pt"))
    enabled = sorted(
        name for name, mod in model.named_modules() if name.endswith("quantizer") and _on(mod)
    )
    writer.write_json(
        "quantize.json",
        {
            "weights": opts.weights,
            "kv_cache": opts.kv_cache,
            "config": CONFIGS[opts.weights],
            **({"block_size": opts.block_size} if opts.block_size else {}),
            **({"awq_alpha_step": opts.awq_alpha_step} if opts.awq_alpha_step else {}),
            "device": torch.cuda.get_device_name() if cuda else "cpu",
            "fused_groups": fused,
            "folded_scales": folded,
            "calibration_texts": len(calibration),
            "calibration_tokens": sum(len(t) for t in calibration),
            **({"lm_head_outliers": outliers} if outliers else {}),
            "quantizers": enabled,
            "seconds": round(seconds, 3),
        },
    )
    request.log(
        f"{len(enabled)} quantizers enabled, calibrated in {seconds:.1f} s; {kept} tensors "
        "saved (the checkpoint's unchanged weights are read from it)"
    )


def lm_head_outliers(
    model: Any, calibration: list[list[int]], n: int, forward_loop: Any
) -> dict[str, Any]:
    """The `n` input channels of the output projection with the largest mean |x| over
    the calibration texts, run through the calibrated model (precision.lm_head_outliers:
    the onnx step keeps them out of the quantized lm_head, builders/causal_lm/_nbits.py),
    largest first, with those means."""
    import torch

    head = model.get_output_embeddings()
    total: list[Any] = []

    def record(_module: Any, args: tuple[Any, ...]) -> None:
        x = args[0].detach().float().abs().reshape(-1, args[0].shape[-1])
        total.append(x.sum(0))
        total.append(torch.tensor(float(x.shape[0])))

    hook = head.register_forward_pre_hook(record)
    try:
        forward_loop(model, calibration)
    finally:
        hook.remove()
    sums, rows = sum(total[0::2]), sum(total[1::2])
    mean = (sums / rows).cpu()
    top = torch.argsort(mean, descending=True)[:n]
    return {
        "channels": [int(i) for i in top],
        "mean_abs": [round(float(mean[i]), 6) for i in top],
        "median_mean_abs": round(float(mean.median()), 6),
    }


def _on(module: Any) -> bool:
    return bool(getattr(module, "is_enabled", False))
