"""text-generation: one module per step kind, and the helpers only they use.

export.py     torch -> ONNX with an explicit KV cache (and hidden-state outputs)
quantize.py   modelopt fake-quantization with calibration
onnx.py       graph optimizer, full check, the I/O contract (io.json)
drafter.py    the drafter engines of speculative variants (MTP, EAGLE-3, DFlash/DSpark)
bundle.py     engines + tokenizer + bundle.json
reference.py  the independent fp32 transformers reference
validate.py   runs the bundle through runtime/ and measures it against the reference
scoring.py    the shipped evaluation text, its windows and teacher-forced scores, which
              reference and validate share (and bench/ measures peers with)
backends/     the engine step, one builder per backend: onnxruntime (fp32, quantized,
              and fp16|bf16 through _half.py), aoti, inductor, tensorrt; a graph (or the
              checkpoint) -> an engine
_adapter _assistant _attention _bundle_variants _cache _capture _determinism _drafters
_features _nbits _ort_attention _qdq _tracefix
              private helpers (_features: the runtime features validate exercises;
              _assistant: Gemma 4's MTP assistant as one traced drafting step;
              _determinism: the same greedy tokens in fresh processes;
              _ort_attention: attention as onnxruntime's fused kernels)
"""
