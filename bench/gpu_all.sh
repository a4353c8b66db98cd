#!/bin/bash
# Issue 18's whole GPU session in one device call: the evidence builds of every GPU
# recipe (bench/gpu_evidence.sh, doit -n 4) and the SmolLM2-geometry builds run side
# by side; then `doit run ... stats=1` on the GPU bundles, greedy and seeded; then the
# timed benches, one at a time: the first SmolLM2-geometry spec against HF and the
# hand-written paths (bench/gpu_smollm2_shape.sh), the tiny llama bundle
# (bench/decode_gpu.py), the other SmolLM2-geometry specs last. Everything lands in $OUT (evidence.tar.gz, decode_*.txt, run.txt).
#   bash bench/gpu_all.sh [SHAPE_SPECS...]    default: bf16:inductor:1:200 fp32:inductor,autotune:1:240
# GPU_RECIPES (default: every *-h200 recipe) and TINY_BENCH=0 narrow a re-run.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1  # nothing outside the machine can be reached
GPU_RECIPES=${GPU_RECIPES:-$(ls recipes | sed -n 's/\.yaml$//p' | grep -- '-h200$')}
specs=("$@"); [ ${#specs[@]} -eq 0 ] && specs=(bf16:inductor:1:200 fp32:inductor,autotune:1:240)
shape=()
for spec in "${specs[@]}"; do
  compute=${spec%%:*}
  shape+=("smollm2-shape-inductor-$([ "$compute" = fp32 ] || echo "$compute-")h200")
done
JOBS=4 bash bench/gpu_evidence.sh "${EVIDENCE_SECONDS:-330}" $GPU_RECIPES >"$OUT/evidence.txt" 2>&1 &
evidence=$!
while [ ! -e /tmp/site/.kiln-wheels ]; do sleep 1; done
export PYTHONPATH=$PWD:/tmp/site
(
  export KILN_ROOT=/tmp/shape/catalog KILN_STORE=/tmp/shape/store
  python3 bench/shape.py /tmp/shape >/dev/null &&
    timeout 330 python3 -m doit -n 2 -f dodo.py build allow_quality_fail=1 \
      recipe="$(IFS=,; echo "${shape[*]}")" >/tmp/shape_build.txt 2>&1
  tail -8 /tmp/shape_build.txt
)
wait $evidence
{
  for r in tiny-llama-inductor-h200 tiny-llama-ngram-inductor-h200; do
    for sampling in "" "temperature=0.8 seed=3"; do
      echo "== doit run recipe=$r $sampling stats=1"
      python3 -m doit -f dodo.py run recipe="$r" "prompt=one two three one two three" \
        max_new_tokens=64 stats=1 $sampling 2>&1 | grep -v Warning | tail -4
    done
  done
} | tee "$OUT/run.txt"
bash bench/gpu_smollm2_shape.sh "${specs[0]}"
[ "${TINY_BENCH:-1}" = 0 ] || python3 bench/decode_gpu.py --recipe tiny-llama-inductor-h200 --paths inductor,autotune \
  --rounds 3 --hf-rounds 1 2>&1 | grep -v Warning | tee "$OUT/decode_tiny-llama-inductor-h200.txt"
[ ${#specs[@]} -gt 1 ] && bash bench/gpu_smollm2_shape.sh "${specs[@]:1}"
