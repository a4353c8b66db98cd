"""AWQ's input scales folded away (builders/common/siblings.py fold_input_scales) on a
real modelopt int4-awq calibration of a small random Llama: the folded model computes
the logits the unfolded one did, its integer codes are the ones AWQ calibrated, and
no input quantizer of a fused layer or of down_proj multiplies anything any more."""

from __future__ import annotations

import copy
from typing import Any

import modelopt.torch.quantization as mtq
import torch


def calibrated() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from builders.causal_lm.quantize import config
    from builders.common import siblings

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = LlamaForCausalLM(cfg).eval()
    assert siblings.fuse(model) == 4
    texts = [torch.randint(0, 256, (1, 24)) for _ in range(4)]

    def loop(m: Any) -> None:
        with torch.no_grad():
            for ids in texts:
                m(ids)

    mtq.quantize(model, config(mtq, "int4-awq", "fp32", block_size=16), loop)
    return model


def codes(model: Any) -> dict[str, Any]:
    """Each fused gate_up layer's integer codes: weight / step, where the step is the
    weight quantizer's output over its input on the weight's nonzero entries."""
    out = {}
    for name, module in model.named_modules():
        if name.endswith("gate_up_proj"):
            with torch.no_grad():
                w = module.weight.detach().double()
                q = module.weight_quantizer(module.weight).detach().double()
                amax = module.weight_quantizer.amax.detach().double().reshape(w.shape[0], -1)
            step = torch.repeat_interleave(amax / 7, w.shape[1] // amax.shape[1], dim=1)
            out[name] = torch.round(q / step)
    return out


def test_folding_awqs_scales_keeps_the_logits_and_the_integers() -> None:
    from builders.common import siblings

    model = calibrated()
    before = copy.deepcopy(model)
    ids = torch.randint(0, 256, (2, 20))
    # per layer: the qkv and gate_up scales into the norms, down's into up's rows
    assert siblings.fold_input_scales(model) == 6
    with torch.no_grad():
        want, got = before(ids).logits, model(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for name, module in model.named_modules():
        quantizer = getattr(module, "input_quantizer", None)
        if quantizer is None or not name.endswith(("qkv_proj", "gate_up_proj", "down_proj")):
            continue
        assert getattr(quantizer, "pre_quant_scale", None) is None, name
    old, new = codes(before), codes(model)
    assert old.keys() == new.keys() and len(old) == 2
    for name in old:
        assert torch.equal(old[name], new[name]), name


def test_down_proj_is_not_folded_where_blocks_span_rows() -> None:
    """Per-tensor weight scales: scaling some rows would move the one amax, and every
    integer with it, so down's scale stays a Mul."""
    from builders.common import siblings

    model = calibrated()
    for name, module in model.named_modules():
        if name.endswith("gate_up_proj"):
            module.weight_quantizer.block_sizes = None
            module.weight_quantizer.axis = None
    assert siblings.fold_input_scales(model) == 4  # the norms only
    downs = [m for n, m in model.named_modules() if n.endswith("down_proj")]
    assert all(m.input_quantizer.pre_quant_scale is not None for m in downs)
