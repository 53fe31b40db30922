#!/usr/bin/env bash
# advisor analyze, with trials and its default settings, on other workloads than the CIFAR
# ladder: what a user would run on a script of their own. Each run is packed into $OUT.
#   usage: [BUDGET=3] [TIMEOUT=280] [PLAIN=1] [TRACES=0: 1 keeps the baseline's trace] bash benchmarks/gpu_workloads.sh EXAMPLE [EXAMPLE ...]
# (EXAMPLE: a file name under examples/ without .py)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/work; rm -rf $W; mkdir -p $W
export TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d)  # as on a machine that never compiled it
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for ex in "$@"; do
  if [[ ${PLAIN:-1} == 1 ]]; then
    echo "== plain python: $ex"
    start=$(date +%s)
    timeout 120 python3 examples/$ex.py 2>&1 | tail -4
    echo "exit $? wall $(( $(date +%s) - start ))s"
  fi
  echo "== advisor analyze $ex"
  start=$(date +%s)
  timeout -s INT ${TIMEOUT:-280} python3 -m advisor analyze --out $W/$ex --budget ${BUDGET:-3} examples/$ex.py
  echo "exit $? wall $(( $(date +%s) - start ))s"
  python3 benchmarks/trials_figures.py $W/$ex
  tar -C $W -czf $OUT/$ex.tar.gz --exclude="$ex/tb" $ex
  [[ ${TRACES:-0} == 1 ]] && tar -C $W -czf $OUT/$ex-baseline-trace.tar.gz $ex/tb/baseline
done
ls -la $OUT
