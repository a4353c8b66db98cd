"""Builders for task text-classification (an encoder with a classification head).

One module per step kind, like builders/: kiln.store.execute runs `builders.classify.<kind>`
for a step whose options say `task: text-classification` (kiln.schema.FAMILY), and
each step's key covers the import closure of its module (kiln.plan.toolchain).

The graph's contract, which runtime/classify.py relies on:

    inputs   input_ids [batch, seq] int64
             attention_mask [batch, seq] int64       (1 = real token, 0 = padding)
             token_type_ids [batch, seq] int64       (only where the model has segments)
    outputs  logits [batch, num_labels] float32

Batches are right-padded: absolute position embeddings then see each real token at
the position it has alone, and the mask hides the padding from attention.

  export.py     the checkpoint -> ONNX, with the contract above
  onnx.py       graph tidy and check (builders/common/graph.py)
  engine.py     onnxruntime's offline optimization and a smoke run (builders/common/ort.py)
  bundle.py     engine + tokenizer + bundle.json
  reference.py  the independent fp32 transformers reference
  validate.py   the bundle through runtime/, measured against the reference
"""

TASK = "text-classification"
