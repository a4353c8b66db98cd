"""Builders for task image-text-to-text: what a vision-language recipe adds to a causal
LM's steps. Its decoder's export, onnx, engine and bundle steps are causal_lm's (the
graph takes image_features as one more input, builders/causal_lm/export.py), its
vision program is builders/vision/'s, and the two steps that judge it are here
(kiln.plan.toolchain dispatches them):

  reference.py  transformers' own processor and generate on each prompt with its image
  validate.py   the bundle through runtime/vlm.py against it, and the image sensitivity

Prompt i asks about validation image i modulo their number (kiln.plan
VALIDATION_IMAGES, the files in builders/data/images/).
"""
