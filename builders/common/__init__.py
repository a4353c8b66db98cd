"""What the builder families share (imported from any family; no underscores: the folder says it).

hf.py       loading checkpoints with transformers, cache keyword, quantized restore
encoder.py  the encoder families' export, graph check, engine and bundle helpers
ort.py      onnxruntime engines: provider, offline optimization, smoke run, engine.json
"""
