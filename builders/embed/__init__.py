"""Builders for task feature-extraction (an encoder whose pooled states are the output).

One module per step kind, like builders/classify: kiln.store.execute runs
`builders.embed.<kind>` for a step whose options say `task: feature-extraction`
(kiln.schema.FAMILY), and those steps hash their modules' import closures, so
text-generation keys never depend on it.

The graph (builders/common/encoder.py's contract) outputs every token's state,
`last_hidden_state [batch, seq, hidden] float32`; runtime/embed.py pools it into
one vector per text as the checkpoint's sentence-transformers modules say
(export.pooling), and the reference pools transformers' states the same way.

  export.py     the checkpoint -> ONNX, with the contract above
  onnx.py       graph tidy and check (builders/common/graph.py)
  engine.py     onnxruntime's offline optimization and a smoke run (builders/common/ort.py)
  bundle.py     engine + tokenizer + bundle.json
  reference.py  the independent fp32 transformers reference
  validate.py   the bundle through runtime/, measured against the reference
"""

TASK = "feature-extraction"
