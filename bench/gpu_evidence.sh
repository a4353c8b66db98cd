#!/bin/bash
# The GPU host's evidence run (issue 18): build and validate recipes for the GPU with
# one `doit -n JOBS build` (default 4: the builds share the one GPU), then pack the
# manifests and the log into $OUT/evidence.tar.gz (the device tool returns at most 8
# files). Its Python lacks kiln's pins, so they come as wheels in .whl/ (FIELD_NOTES,
# the GPU host). Touches /tmp/evidence.done at the end, for a bench waiting on it
# (bench/gpu_smollm2_shape.sh's BENCH_AFTER).
#   bash bench/gpu_evidence.sh SECONDS RECIPE...
# Once per machine: a second script on the same machine must not replace the files
# under a running one's imports.
[ -e /tmp/site/.kiln-wheels ] || { python3 -m pip install -q --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.kiln-wheels; } || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
seconds=$1; shift
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)"
list=$(IFS=,; echo "$*")
log=${EVIDENCE_LOG:-/tmp/evidence.log}
timeout "$seconds" python3 -m doit -n "${JOBS:-4}" -f dodo.py build recipe="$list" \
  allow_quality_fail=1 publish=1 >"$log" 2>&1
echo "doit exit $?"
grep -E "verdict|pass|fail|unsupported|Error" "$log" | tail -40
mkdir -p /tmp/evidence/manifests
for r in "$@"; do cp "manifests/$r.json" /tmp/evidence/manifests/ 2>/dev/null || echo "no manifest for $r"; done
cp "$log" /tmp/evidence/
tar -czf "$OUT/evidence.tar.gz" -C /tmp/evidence .
touch /tmp/evidence.done
