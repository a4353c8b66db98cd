"""inductor's image-text-to-text engine (issue 40): the text decoder's programs, of
which the prefill chunk also takes the vision program's features.

    prefill.pt2  (weights..., input_ids [B, T], position_ids, slots, mask, *cache,
                  image_features [B * T, hidden], image_rows []) -> logits [B, T, vocab]
    decode.pt2   as a text engine's: a generated token is text (an image token
                 generated keeps its own embedding, as in the ONNX graph)

The features are merged inside the program by the ONNX export's own
merge_image_features (builders/causal_lm/export.py): the k-th image token of the chunk,
row by row, takes feature row k. The input's shape is static, as the programs' are: a
chunk of B x T tokens holds at most B * T image tokens, so the runtime writes the rows
of the chunk's own image tokens first and zeros after them, and says in image_rows how
many it wrote (runtime/inductor.py). An image token past those rows keeps its own
embedding, as the ONNX graph's merge keeps one past its features: a teacher-forced
sequence whose generated tokens include the image token (the tiny Idefics3 generates
<image>) reads them as text, as its decode steps fed them.

The vision program stays the ONNX one run by onnxruntime in fp32 (builders/vision/,
bundle.json vision.engine), on its CPU provider for a GPU target too (the GPU host has
no onnxruntime-gpu): it runs once per image, not per token, and it keeps one vision
program for both backends and every precision, as TensorRT-LLM's VLM recipes keep their
vision encoders fp32. In fp16 or bf16 the prefill program takes its features in the
compute dtype: the runtime's copy of the fp32 rows into the program's input (on the
device) is the one cast, at the merge (runtime/inductor.py `call`).

An M-RoPE decoder (Qwen2-VL, Qwen2.5-VL, Qwen3-VL: position_axes) takes its positions as
[B, T, 3] in every program, program.json "position_axes" 3; the step moves the triple
first, as transformers takes it. A picture's tokens and positions vary with its grid,
which the runtime's grid runner computes (runtime/inductor_vlm.py). A DeepStack
decoder (Qwen3-VL) also adds rows of the vision tower's intermediate mergers at the
image tokens after its first layers: the prefill's feature rows are
[B * T, (1 + levels) * hidden], each picture token's merged row and then its rows of
each level, as the grid runner keeps them (feature_width), and the program splits them.

An architecture whose image tokens attend each other both ways (Gemma 3's
token_type_ids, builders/causal_lm/export.py bidirectional_images) is refused: the
programs' mask is causal over slots (inductor.py's Step), and their prefill windows of
a fixed length may cut an image, whose first part would then never see its last.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request

# The wrapper's name for the model, which prefixes its parameters' names.
INNER = "model"


def image_token(request: Request, model: Any) -> int:
    """The image token the prefill program merges features at; a model whose image
    tokens attend both ways is unsupported (module docstring)."""
    from builders.causal_lm.export import bidirectional_images, image_token_id

    name = type(model).__name__
    if bidirectional_images(model):
        raise request.unsupported(
            f"{name}'s image tokens attend each other both ways (token_type_ids); the "
            "inductor programs' mask is causal over slots and their fixed-length prefill "
            "windows may cut an image: build it with backend onnxruntime"
        )
    token = image_token_id(model)
    if token is None:
        raise request.error(f"{name}'s config has no image_token_id", "a kiln bug: report it")
    return token


def position_axes(model: Any) -> int:
    """3 where the decoder rotates by (t, h, w) positions (M-RoPE: Qwen2-VL, Qwen2.5-VL),
    else 1: every program then takes position_ids [B, T, 3], the triple last as the ONNX
    graph takes it (builders/causal_lm/export.py), which the runtime computes from the
    pictures' grids (runtime/mrope.py) and the decode step advances by one on all three."""
    from builders.causal_lm.export import mrope_positions

    return 3 if mrope_positions(model) else 1


def text_weights(model: Any, names: list[str], weights: list[Any]) -> tuple[list[str], list[Any]]:
    """The parameters the decoder reads (its language model and output projection):
    the vision tower and projector run in the vision program, not here."""
    modules = (model.get_decoder(), model.get_output_embeddings())
    used = {p.data_ptr() for m in modules for p in m.parameters()}
    kept = [(n, w) for n, w in zip(names, weights, strict=True) if w.data_ptr() in used]
    return [n for n, _ in kept], [w for _, w in kept]


def with_images(model: Any, token: int) -> Any:
    """The model as (input_ids, image_features, image_rows, **forward's keywords) -> its
    output, the first image_rows features merged at `token` into the token embeddings
    (merge_image_features), the image tokens past them left as their own embeddings. A
    DeepStack decoder's feature rows carry each level's rows after the merged ones
    (feature_width): the same image tokens take them, added after the decoder's first
    layers by the ONNX export's own hooks (deepstack_hooks), which add nothing in a
    forward that did not set them (the decode and verify programs)."""
    import torch

    from builders.causal_lm.export import (
        deepstack_hooks,
        deepstack_levels,
        deepstack_rows,
        merge_image_features,
    )

    width, levels = hidden_size(model), deepstack_levels(model)
    added: dict[int, Any] = {}  # this forward's DeepStack rows by layer
    if levels:
        deepstack_hooks(model, levels, added)

    class WithImages(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            setattr(self, INNER, model)

        def forward(
            self, input_ids: Any, image_features: Any, image_rows: Any, **kwargs: Any
        ) -> Any:
            inner = getattr(self, INNER)
            embeds = inner.get_input_embeddings()(input_ids)
            is_image = input_ids == token
            count = torch.cumsum(is_image.reshape(-1).long(), 0).reshape(input_ids.shape)
            # the image tokens past the rows written are the chunk's last: not merged
            fed = torch.where(is_image & (count > image_rows), -1, input_ids)
            merged = merge_image_features(fed, embeds, image_features[:, :width], token)
            if levels:  # [rows, levels, hidden], picked as the features are
                deep = image_features[:, width:].reshape(-1, levels, width)
                added.update(enumerate(deepstack_rows(fed, deep, token)))
            try:
                return inner(inputs_embeds=merged, **kwargs)
            finally:
                added.clear()

    return WithImages().eval()


def hidden_size(model: Any) -> int:
    """The width of a merged feature row: the decoder's hidden size."""
    return int(model.config.get_text_config(decoder=True).hidden_size)


def feature_width(model: Any) -> int:
    """The width of the prefill program's feature rows: the merged row, then a DeepStack
    decoder's (Qwen3-VL) rows of each level side by side, as the runtime's grid runner
    keeps a picture token's rows (runtime/grid_vlm.py)."""
    from builders.causal_lm.export import deepstack_levels

    return hidden_size(model) * (1 + deepstack_levels(model))
