"""kiln: recipes as data, exact incremental builds, traceable evidence.

The core, one sub-package per stage of the data flow; each imports only the ground
floor and the stages to its left (tests/unit/test_layers.py):

  schema/ errors.py canonical.py fsio.py hostinfo.py paths.py   the ground floor
  statcache.py   file digests cached by stat in the store (git's index rule), on the ground floor
  pins.py        what a pin may be: names, versions, digests, local sources, wheels (stdlib)
  proc.py        every process kiln starts; user values after `--` (stdlib)
  headers.py     a GGUF header walked with counts and lengths bounded, before gguf reads it (stdlib)
  catalog/    recipes/ thresholds/ prompts/ catalog/*.yaml -> Catalog (guarded YAML, rules)
  plan/       Recipe -> Plan: steps and keys, variants, toolchain (versions, code digests)
  store/      steps -> artifacts: store, execute, locks, verify, gc, the builder contract
  evidence/   artifacts -> manifests/: lock assembly, evidence records, gates
  site/       catalog + manifests -> _site/ (templates live in site/ at the top)
  commands/   one module per doit verb, with no doit in it (tasks.py wires them)
  replay/     nightly replay, local or on Ray
  serve/      `doit serve`: the site, and an OpenAI-compatible API for built recipes

It imports only light libraries (pydantic, PyYAML, jinja2, filelock, rich, starlette,
uvicorn); never
torch, transformers, onnx, onnxruntime, modelopt or tensorrt, never a builder, and
never doit (only tasks.py and dodo.py do).
"""

__version__ = "0.1.0"
