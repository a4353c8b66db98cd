"""Builders for task feature-extraction (an encoder whose pooled states are the output).

One module per step kind, like builders/classify: kiln.store.execute runs
`builders.embed.<kind>` for a step whose options say `task: feature-extraction`
(kiln.schema.FAMILY), and those steps hash their modules' import closures, so
text-generation keys never depend on it.

The graph (builders/common/encoder.py's contract) outputs every token's state,
`last_hidden_state [batch, seq, hidden] float32`; runtime/embed.py pools it into
one vector per text as the checkpoint's sentence-transformers modules say
(export.pooling), and the reference pools transformers' states the same way.
"""

TASK = "feature-extraction"
