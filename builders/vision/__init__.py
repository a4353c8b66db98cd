"""Builders for task image-features: a vision-language model's vision program, pixel
values -> image features, which an image-text-to-text recipe's bundle runs before its
text decoder (builders/causal_lm/, whose graph takes the features as one more input
and writes them at the image tokens).

No recipe names this task: kiln.plan adds these steps to an image-text-to-text
recipe's plan, in fp32 whatever the recipe's precision (the language model alone is
quantized), and kiln.store.execute runs `builders.vision.<kind>` for them
(kiln.schema.FAMILY).

The graph's contract (runtime/causal_lm.py's Vision runs it):

    inputs   pixel_values [1, 3, height, width] float32   (runtime/images.py)
    outputs  image_features [tokens_per_image, hidden] float32

A grid vision program (Qwen2-VL, Qwen2.5-VL, Qwen3-VL; export.json layout "grid")
takes a picture's patches and its grid's index tensors instead, and gives t * h * w /
merge^2 rows; Qwen3-VL's also gives its DeepStack rows, deepstack_features [rows,
levels, hidden], which its decoder takes too (builders/vision/_grid.py). A crops
vision program (Idefics3, SmolVLM, InternVL; layout "crops") takes one picture's
crops [1, crops, ...] (and Idefics3's pixel masks) and gives crops * tokens_per_image
rows (builders/vision/_crops.py).

One image per run: transformers returns a VLM's image features as a list per image,
which the exporter traces as a Split of a fixed count (builders/vision/export.py).

  export.py     the checkpoint's vision tower and projector -> ONNX
  _grid.py      Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's towers as a graph of any patch
                grid (its index tensors as inputs, made at run time by runtime/mrope.py;
                masked attention spans)
  _crops.py     Idefics3's and InternVL's tower and connector on any number of crops
                of one picture
  onnx.py       graph tidy and check (builders/common/graph.py)
  engine.py     onnxruntime's offline optimization and a smoke run (builders/common/ort.py)
"""
