#!/bin/bash
# Issue 18's SmolLM2-135M-geometry benchmark on the GPU host, through the product:
# bench/shape.py's catalog (seeded weights of that shape), each recipe built and
# validated with `doit build`, then timed by bench/decode_gpu.py against HF. Wheels for
# kiln's pins come in .whl/ (as bench/gpu_evidence.sh). Output and manifests go to $OUT.
#   bench/gpu_smollm2_shape.sh COMPUTE:PATHS:HF_ROUNDS[:SECONDS[:CONFIG]] ...   e.g. bf16:inductor:1
# PATHS: decode_gpu.py --paths (or "none"); SECONDS bounds the build plus the bench;
# CONFIG: NAME=VALUE,... Inductor options for the bench's compiles (--inductor-config),
# or attention=BACKEND for the bundle's decode attention (--decode-attention).
# Once per machine: a second script on the same machine must not replace the files
# under a running one's imports.
[ -e /tmp/site/.kiln-wheels ] || { python3 -m pip install -q --no-index --no-deps --no-compile \
  --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.kiln-wheels; } || exit 1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
export KILN_ROOT=/tmp/shape/catalog KILN_STORE=/tmp/shape/store
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -d /tmp/shape/catalog/recipes ] || python3 bench/shape.py /tmp/shape || exit 1
mkdir -p "$OUT/manifests"
for spec in "$@"; do
  IFS=: read -r compute paths hf seconds config <<<"$spec"
  r=smollm2-shape-inductor-$compute-h200; [ "$compute" = fp32 ] && r=smollm2-shape-inductor-h200
  end=$((SECONDS + ${seconds:-400}))
  echo "== $r: doit build"
  timeout $((end - SECONDS)) python3 -m doit -f dodo.py build recipe="$r" allow_quality_fail=1 2>&1 | tail -12
  cp "$KILN_ROOT/manifests/$r.json" "$OUT/manifests/" 2>/dev/null || echo "no manifest for $r"
  flags=(--paths "$paths"); [ "$paths" = none ] && flags=(--only-bundle)
  for c in ${config//,/ }; do
    case $c in
      attention=*) flags+=(--decode-attention "${c#attention=}") ;;
      *) flags+=(--inductor-config "$c") ;;
    esac
  done
  log="$OUT/decode_$r${config:+_${config//[=,]/_}}.txt"
  cmd=(python3 bench/decode_gpu.py --checkpoint "$KILN_ROOT/checkpoints/smollm2-shape"
    --dtype "$compute" --recipe "$r" --rounds 3 --hf-rounds "$hf" "${flags[@]}")
  # BENCH_AFTER=FILE: time nothing before FILE exists (other GPU work runs alongside
  # the builds, never alongside the bench).
  while [ -n "$BENCH_AFTER" ] && [ ! -e "$BENCH_AFTER" ] && [ $SECONDS -lt $end ]; do sleep 2; done
  echo "== ${cmd[*]}" | tee "$log"
  timeout $((end - SECONDS)) "${cmd[@]}" 2>&1 | grep -v Warning | tee -a "$log"
done
