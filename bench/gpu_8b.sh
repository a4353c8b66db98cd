#!/bin/bash
# Issue 39, item 4: an 8B-class model through the product on the GPU machine. Qwen3-8B's
# geometry with seeded weights (bench/shape.py --shape qwen3-8b), built by `doit build`
# in bf16 and then fp8 (the quantize step calibrates on the GPU), each validated against
# its fp32 reference, each timed by bench/decode_gpu.py through runtime.open against HF
# `generate` and the hand-written Inductor step, at batch 1 and batch 8, against the
# bandwidth bound measured in the same run. Every stage runs under bench/watch.py: peak
# host RSS of its process tree, peak GPU memory, disk, wall.
#
#   bash bench/gpu_8b.sh start       (call with carry .whl and .gpu/head8.tar.gz, made
#                                    here by `git archive --format=tar.gz -o
#                                    .gpu/head8.tar.gz HEAD`: the commit's tree, not the
#                                    work tree's uncommitted edits (without it, the work
#                                    tree); the wheels are installed once, the tree put in
#                                    $WORK/kiln, the job started in the background with
#                                    setsid, so that it outlives the call; returns at once)
#   bash bench/gpu_8b.sh wait SECS   waits up to SECS for the job, prints its progress,
#                                    packs $WORK/out into $OUT/results8.tar.gz (and
#                                    summary.txt beside it); call again until "job done"
#
# The wheels (.whl, cp312 manylinux, README of the device tool): pydantic, pydantic-core,
# annotated-types, typing-inspection, doit, transformers and tokenizers at pyproject's pins,
# llguidance, nvidia-modelopt with orloge, cpsat-logutils, omegaconf and pulp (the fp8
# quantize step's modelopt imports pulp: without it, ModuleNotFoundError, 2026-12-07b).
# The machine stays up 30 s after a call: make the calls back to back. Settings (env):
# LAYERS (36), TARGET (sm90), COMPUTES ("bf16 fp8"), JOBS (doit -n, 2: the CPU reference
# runs beside the engine), MAXB (the engine's batch, 8), CHUNK (prefill chunk, 128),
# MAXLEN (max_seq_len, 512: the decode attention reads the whole static cache, 8 rows x
# 512 positions = 0.6 GB a step in bf16 beside 16.4 GB of weights; 1024 would double it),
# BATCH (the bench's batch row, 8), NEW (new tokens a prompt in the bench, 64), WORK
# (/tmp/k8), DSPARK (1: one more stage after the others, issue 39's headline: the bf16
# recipe speculating with bench/shape.py's seeded DSpark drafter at Qwen3-8B's geometry,
# qwen3-8b-shape-inductor-bf16-dspark-<target>, built at batch 1 and validated: lossless
# against the target's greedy tokens, acceptance recorded; no bench stage; unset, the
# job is what it was), PROFILE (1: before the first recipe's build, its bundle alone and
# bench/probes/load_profile.py on it, one process: where the load goes, the 8B bundle's
# first load took 165 s; the build after it reuses that bundle), BENCH_FIRST (1: each
# recipe's bundle alone, then its bench, then the build's reference and validate: the
# figures first, where the device time may end before validate does), HANDWRITTEN (0:
# no hand-written Inductor step in the bf16 bench, only the bundle and HF). On a CPU host the same
# job runs in the foreground, at a reduced size:
#   TARGET=cpu LAYERS=2 JOBS=1 MAXB=2 CHUNK=32 BATCH=2 NEW=8 PYTHON=.venv/bin/python \
#     WORK=/tmp/k8cpu OUT=/tmp/k8cpu bash bench/gpu_8b.sh job
# (fp8 ends unsupported-here there: no fp8 tensor cores; its quantize step still runs).
set -u
stage=${1:-}
WORK=${WORK:-/tmp/k8}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
case $stage in
start)
  if [ -d .whl ] && [ ! -e /tmp/site/.kiln-wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && touch /tmp/site/.kiln-wheels || exit 1
  fi
  mkdir -p "$WORK/kiln" "$WORK/out"
  if [ ! -e "$WORK/kiln/.copied" ]; then  # once: a later call's tree must not replace it
    if [ -e .gpu/head8.tar.gz ]; then  # a commit's tree (git archive), not others' edits
      tar -C "$WORK/kiln" -xzf .gpu/head8.tar.gz && touch "$WORK/kiln/.copied"
    else
      tar --exclude=./.git --exclude=./.whl --exclude=./.gpu --exclude=./.kiln \
        --exclude=./node_modules --exclude=./_site -cf - . |
        tar -C "$WORK/kiln" -xf - && touch "$WORK/kiln/.copied"
    fi
  fi
  rm -f "$WORK/out/job.done"  # a second start's wait must not read the first job's mark
  cd "$WORK/kiln" && PYTHON=${PYTHON:-python3} setsid nohup bash bench/gpu_8b.sh job \
    >>"$WORK/out/job.log" 2>&1 </dev/null &
  sleep 5
  cat "$WORK/out/job.log"
  ;;
job)
  py=${PYTHON:-python3}
  out=$WORK/out
  mkdir -p "$out/manifests"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}:/tmp/site
  export KILN_ROOT=$WORK/catalog KILN_STORE=$WORK/store
  target=${TARGET:-sm90}
  watch() {  # LABEL CMD...: the command under bench/watch.py, its summary in watch.txt
    local label=$1; shift
    echo "== $(date -u +%T) $label"
    $py bench/watch.py --log "$out/watch.log" --every 2 --disk "$WORK" --label "$label" -- "$@"
    local rc=$?
    grep "^# $label:" "$out/watch.log" | tail -1 >>"$out/watch.txt"
    return $rc
  }
  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
    nproc; free -g; df -h "$WORK" /tmp
    $py -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  } >"$out/info.txt" 2>&1
  cat "$out/info.txt"
  computes=${COMPUTES:-bf16 fp8}
  dspark=$WORK/catalog/recipes/qwen3-8b-shape-inductor-bf16-dspark-$target.yaml
  [ "${DSPARK:-0}" = 1 ] && computes="$computes bf16-dspark"
  if [ ! -e "$WORK/catalog/.made" ] || { [ "${DSPARK:-0}" = 1 ] && [ ! -e "$dspark" ]; }; then
    watch catalog $py bench/shape.py "$WORK" --shape qwen3-8b --target "$target" \
      --layers "${LAYERS:-36}" --max-batch-size "${MAXB:-8}" --prefill-chunk-len "${CHUNK:-128}" \
      --max-seq-len "${MAXLEN:-512}" \
      --computes "$(echo $computes | tr ' ' ,)" &&
      touch "$WORK/catalog/.made" || exit 1
  fi
  ckpt=$WORK/catalog/checkpoints/qwen3-8b-shape
  bench() {  # COMPUTE RECIPE: bench/decode_gpu.py through the recipe's bundle
    local c=$1 r=$2 bundle
    bundle=$($py bench/artifact.py "$r" bundle 2>&1)
    if [ ! -e "$bundle/bundle.json" ]; then
      echo "no bundle for $r ($bundle): no bench"
      return
    fi
    # the bench: HF in bf16 is the baseline of both; the hand-written step with bf16 only.
    # Alone on the GPU: after any evidence job of bench/gpu_real.sh on the same machine
    while pgrep -f "gpu_real.sh jo[b]" >/dev/null; do sleep 5; done
    local paths=(--paths inductor)
    [ "$c" = bf16 ] && [ "${HANDWRITTEN:-1}" = 1 ] || paths=(--only-bundle)
    watch "bench $r" timeout "${BENCH_SECONDS:-900}" $py bench/decode_gpu.py \
      --checkpoint "$ckpt" --dtype bf16 --recipe "$r" --new-tokens "${NEW:-64}" --rounds 3 \
      --hf-rounds 0 --batch "${BATCH:-8}" --bandwidth --result "$out/results.jsonl" --no-second-load "${paths[@]}" \
      >"$out/decode_$c.txt" 2>&1
    grep -v Warning "$out/decode_$c.txt" | tail -30
  }
  for c in $computes; do
    r=qwen3-8b-shape-inductor-$c-$target
    first=$([ "$c" = "${computes%% *}" ] && echo 1 || echo 0)
    if [ "$c" != bf16-dspark ] && { [ "${BENCH_FIRST:-0}" = 1 ] || { [ "${PROFILE:-0}" = 1 ] && [ "$first" = 1 ]; }; }; then
      # the recipe's bundle alone (no reference, no validate), then, with PROFILE, where
      # its load goes (bench/probes/load_profile.py) and, with BENCH_FIRST, its bench:
      # the figures first where the session's device time may end before validate does
      watch "bundle $r" timeout "${BUILD_SECONDS:-1500}" $py -c \
        "import sys; from kiln.commands.build import ensure_bundle; ensure_bundle(sys.argv[1])" \
        "$r" >"$out/bundle_$c.log" 2>&1
      grep -E "^\.|done in|kernel files|rror" "$out/bundle_$c.log" | tail -12
      if [ "${PROFILE:-0}" = 1 ] && [ "$first" = 1 ]; then
        watch "load $r" timeout 900 $py bench/probes/load_profile.py --recipe "$r" --runs 1 \
          >"$out/load_$c.txt" 2>&1
        grep -v Warning "$out/load_$c.txt" | tail -30
      fi
      [ "${BENCH_FIRST:-0}" = 1 ] && bench "$c" "$r"
    fi
    watch "build $r" timeout "${BUILD_SECONDS:-1500}" $py -m doit -n "${JOBS:-2}" -f dodo.py \
      build recipe="$r" allow_quality_fail=1 publish=1 >"$out/build_$c.log" 2>&1
    echo "doit exit $?"
    grep -E "^\.|verdict|pass|fail|unsupported|rror" "$out/build_$c.log" | tail -25
    cp "$KILN_ROOT/manifests/$r.json" "$out/manifests/" 2>/dev/null || echo "no manifest for $r"
    if [ "$c" = bf16-dspark ]; then  # its evidence (lossless, acceptance) is the result
      $py -c "import json,sys; e=json.load(open(sys.argv[1]))['evidence'][-1]; m=e.get('metrics',{}); print('dspark', e.get('verdict'), {k: m.get(k) for k in ('speculative_match_rate','acceptance_rate','tokens_per_forward')})" "$KILN_ROOT/manifests/$r.json" 2>&1
      continue
    fi
    [ "${BENCH_FIRST:-0}" = 1 ] || bench "$c" "$r"
  done
  $py - "$out" >"$out/summary.txt" 2>&1 <<'EOF'
import json, re, sys
from pathlib import Path

out = Path(sys.argv[1])
def lines(name):
    path = out / name
    return path.read_text().splitlines() if path.exists() else []


rows = [json.loads(line) for line in lines("results.jsonl")]
weights = out.parent / "catalog" / "checkpoints" / "qwen3-8b-shape" / "model.safetensors"
size = weights.stat().st_size / 2**30 if weights.exists() else 0.0
print(f"checkpoint {size:.2f} GiB (bf16; {2 * size:.2f} GiB as the fp32 the builders load)")
for line in lines("watch.txt"):
    print(line)
    found = {k: re.search(rf"peak {k} ([0-9.]+) GiB", line) for k in ("host RSS", "GPU memory")}
    if size:
        print("    = " + ", ".join(
            f"{k} {float(m.group(1)) / size:.2f}x the checkpoint" for k, m in found.items() if m
        ))
bundle = {}
for r in rows:
    rates, bounds = r["tokens_per_s"], r["bound_tokens_per_s"]
    print(f"{r['recipe']} on {r['device']}: bandwidth {r['bandwidth_gb_s']} GB/s")
    for label, rate in rates.items():
        bound = bounds.get(label)
        share = f", {rate / bound:.1%} of its bound {bound:.0f}" if bound else ""
        print(f"  {label:32} {rate:9.1f} tokens/s{share}  {r['notes'].get(label, '')}")
    bundle[r["recipe"]] = rates.get("bundle (runtime.open)", 0.0)
bf16 = next((v for k, v in bundle.items() if "-bf16-" in k), 0.0)
fp8 = next((v for k, v in bundle.items() if "-fp8-" in k), 0.0)
if bf16 and fp8:
    print(f"fp8 bundle / bf16 bundle at batch 1: {fp8 / bf16:.2f}x (target >= 1.6x)")
for m in sorted((out / "manifests").glob("*.json")):
    ev = json.loads(m.read_text()).get("evidence", [])
    if ev:
        last = ev[-1]
        print(m.stem, last.get("verdict"), json.dumps(last.get("metrics", {}), sort_keys=True)[:400])
EOF
  cat "$out/summary.txt"
  touch "$out/job.done"
  ;;
wait)
  end=$((SECONDS + ${2:-570}))
  while [ ! -e "$WORK/out/job.done" ] && pgrep -f "gpu_8b.sh job" >/dev/null &&
    [ $SECONDS -lt $end ]; do sleep 5; done
  if [ -e "$WORK/out/job.done" ] && ! pgrep -f "gpu_8b.sh job" >/dev/null; then
    echo "job done"
  else
    echo "job still running"
  fi
  tail -40 "$WORK/out/job.log"
  cat "$WORK/out/watch.txt" 2>/dev/null
  nvidia-smi --query-gpu=memory.used --format=csv,noheader; df -h "$WORK" | tail -1
  cp "$WORK/out/summary.txt" "$OUT/" 2>/dev/null
  tar -czf "$OUT/results8.tar.gz" -C "$WORK/out" .
  ;;
*)
  echo "usage: bash bench/gpu_8b.sh start | wait SECONDS | job" >&2
  exit 2
  ;;
esac
