#!/bin/bash
# The GPU host's evidence run (issue 18): build and validate the inductor recipes for
# sm90 with `doit build`, then copy the manifests to $OUT. Its Python lacks kiln's
# pins, so they come as wheels in .whl/ (FIELD_NOTES, the GPU host).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
mkdir -p "$OUT/manifests"
for r in "$@"; do
  timeout 300 python3 -m doit -f dodo.py build recipe="$r" allow_quality_fail=1 2>&1 | tail -25
  cp "manifests/$r.json" "$OUT/manifests/" 2>/dev/null || echo "no manifest for $r"
done
