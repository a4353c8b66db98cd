"""What the builder families share (imported from any family; no underscores: the folder says it).

child.py    a builder's work in a fresh Python process, its last line of output as JSON
files.py    a large file into an artifact: linked where its bytes cannot change, else copied
hf.py       loading checkpoints with transformers, cache keyword, token ids, quantized save/restore
encoder.py  the encoder families' export, graph check, engine and bundle helpers
graph.py    ONNX graph tidy (onnxscript's optimizer) and check (checker, I/O value info)
measure.py  a validate step's prologue: reference, bundle, batched and timed runs
ort.py      onnxruntime engines: provider, offline optimization, smoke run, engine.json
siblings.py q/k/v and gate/up as one linear layer each; AWQ's scales folded into the norms
weights.py  weights read as the checkpoint stores them, external data shared between steps
"""
