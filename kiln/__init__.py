"""kiln: recipes as data, exact incremental builds, traceable evidence.

The core. It imports only light libraries (pydantic, PyYAML, jinja2, doit,
filelock); never torch, transformers, onnx, onnxruntime, modelopt or tensorrt.
"""

__version__ = "0.1.0"
