"""Loading a checkpoint with transformers, the one way every builder does it, and
reading what its config files say.

fp32, eager attention (the reference semantics, and what traces cleanly), and
safetensors only: pickle-based weights can execute code when loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_causal_lm(checkpoint: Path, auto_class: str = "AutoModelForCausalLM") -> Any:
    """The checkpoint as `auto_class` makes it (a vision-language model's:
    AutoModelForImageTextToText, image_text_class)."""
    import torch
    import transformers
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    model = getattr(transformers, auto_class).from_pretrained(
        checkpoint, dtype=torch.float32, attn_implementation="eager", use_safetensors=True
    )
    return model.eval()


IMAGE_TEXT = "AutoModelForImageTextToText"  # the auto class of task image-text-to-text


def auto_class(task: str) -> str:
    """The transformers auto class of a language-model task's checkpoint."""
    return IMAGE_TEXT if task == "image-text-to-text" else "AutoModelForCausalLM"


def token_ids(value: Any) -> list[int]:
    """A config's token id field (eos_token_id, pad_token_id, ...) as a list: it holds
    one id, a list of them, or nothing."""
    if value is None:
        return []
    return [value] if isinstance(value, int) else list(value)


def cache_keyword(model: Any) -> str:
    """transformers 5.24 calls the cache `cache`; earlier 5.x releases (5.17 on the GPU
    host) `past_key_values`. A wrong keyword is swallowed by **kwargs and the exporter
    then drops the unused past inputs, so ask the signature."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def restore_quantized(model: Any, artifact: Any, assign: bool = False) -> Any:
    """Put modelopt's calibrated quantizers (the quantize step's save_quantized) on the
    model, loaded from the step's checkpoint, first fusing its sibling layers where the
    quantize step calibrated them fused (quantize.json `fused_groups`,
    builders/common/siblings.py). `assign`: the saved tensors become the model's
    (load_state_dict's assign), as a model on the meta device needs."""
    import json

    import modelopt.torch.opt as mto
    import torch

    from builders.common import siblings

    artifact = Path(artifact)
    done = json.loads((artifact / "quantize.json").read_text())
    if done.get("fused_groups"):
        siblings.fuse(model)

    saved = torch.load(artifact / "quantized.pt", map_location="cpu")  # weights_only
    with quiet_stdout():  # modelopt prints "Inserted N quantizers"; the step logs its own
        model = mto.restore_from_modelopt_state(model, saved["modelopt_state"])
    state = saved["model_state_dict"]
    missing, unexpected = model.load_state_dict(state, strict=False, assign=assign)
    if unexpected or sorted(missing) != sorted(saved["unchanged"]):
        raise ValueError(
            f"{artifact}: the quantized state does not fit the model: unexpected "
            f"{sorted(unexpected)[:5]}, missing beyond the unchanged "
            f"{sorted(set(missing) - set(saved['unchanged']))[:5]}"
        )
    return model.eval()


def calibration_of(checkpoint: Path, artifact: Any) -> Any:
    """The quantize step's calibrated quantizers on a model of the checkpoint's config
    that has no weights (the meta device): reading the calibration alone (the inductor
    fp8 engine's scales) takes no second copy of the weights, 33 GB of fp32 at 8B."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint))
    return restore_quantized(model, artifact, assign=True)


def save_quantized(model: Any, checkpoint: Path, path: Path) -> int:
    """mto.save's file (modelopt's state and the model's state dict) less the tensors the
    checkpoint holds unchanged, which `unchanged` names: restore_quantized loads them
    from the checkpoint, as the model it restores onto already has. An fp8 or int8
    calibration changes no weight, so an 8B model's quantized.pt was its 33 GB of fp32
    weights again (issue 39); it is now the quantizers' scales, plus any weight the
    calibration did change (AWQ's folded norms, fused siblings). The tensors kept."""
    import modelopt.torch.opt as mto
    import torch
    from safetensors import safe_open

    state = model.state_dict()
    unchanged = []
    for file in sorted(checkpoint.glob("*.safetensors")):
        with safe_open(file, "pt") as stored:
            for name in stored.keys():  # noqa: SIM118 (safe_open is no dict)
                mine = state.get(name)
                if mine is None or mine.device.type != "cpu":
                    continue
                theirs = stored.get_tensor(name)
                if theirs.shape == mine.shape and torch.equal(theirs.to(mine.dtype), mine):
                    unchanged.append(name)
    for name in unchanged:
        del state[name]
    torch.save(
        {
            "modelopt_state": mto.modelopt_state(model),
            "model_state_dict": state,
            "unchanged": unchanged,
        },
        path,
    )
    return len(state)


def quiet_stdout() -> Any:
    """What a library prints to stdout (modelopt's progress lines) kept out of the
    build's output; errors still reach stderr."""
    import contextlib
    import io

    return contextlib.redirect_stdout(io.StringIO())


def load_for_export(checkpoint: Path, auto_class: str = "AutoModelForCausalLM") -> Any:
    """As load_causal_lm, with the experts as batched matmuls: the default MoE
    expert loop does not trace (FIELD_NOTES: MoE exports only with
    experts_implementation="batched_mm"). The reference keeps the default, so the
    two paths stay independent."""
    import torch
    import transformers
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
    model = getattr(transformers, auto_class).from_pretrained(
        checkpoint,
        dtype=torch.float32,
        attn_implementation="eager",
        experts_implementation="batched_mm",
        use_safetensors=True,
    )
    return model.eval()


def load_processor(checkpoint: Path) -> Any:
    """transformers' processor of a vision-language checkpoint, on its PIL backend (the
    one runtime/images.py follows). Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's and InternVL's
    classes in transformers 5.24 also load a video processor, which has no PIL backend:
    without torchvision (not in the build extra) it cannot load, and with it
    (the GPU machine's image) AutoProcessor's backend="pil" refuses it ("Could not load
    any video processor class ... with pil backend"). The builders read images only, so
    the same class is built with the video part left out on every host
    (tests/builds/test_tinyhub_vlm.py does the same)."""
    import json

    import transformers
    from transformers import AutoProcessor
    from transformers.processing_utils import ProcessorMixin

    kind = json.loads((checkpoint / "config.json").read_text()).get("model_type")
    named = {
        "qwen2_5_vl": "Qwen2_5_VLProcessor",
        "qwen2_vl": "Qwen2VLProcessor",
        "qwen3_vl": "Qwen3VLProcessor",  # its video part as Qwen2.5-VL's
    }.get(kind)
    if named is None and kind != "internvl":
        return AutoProcessor.from_pretrained(checkpoint, backend="pil")
    if kind == "internvl":  # InternVLProcessor takes its video processor as None

        class InternVLImagesOnly(transformers.InternVLProcessor):
            def __init__(
                self,
                image_processor: Any,
                tokenizer: Any,
                chat_template: Any = None,
                image_seq_length: int = 256,
            ):
                super().__init__(image_processor, tokenizer, None, image_seq_length, chat_template)

        return InternVLImagesOnly.from_pretrained(checkpoint, backend="pil")

    class ImagesOnly(getattr(transformers, named)):  # type: ignore[misc]
        def __init__(self, image_processor: Any, tokenizer: Any, chat_template: Any = None):
            self.image_token, self.video_token = "<|image_pad|>", "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    return ImagesOnly.from_pretrained(checkpoint, backend="pil")
