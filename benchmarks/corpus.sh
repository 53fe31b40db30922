#!/usr/bin/env bash
# advisor analyze, with trials and the patch's verification, on the corpus of community-style
# training scripts (benchmarks/corpus/*/), and the upstream's own fast settings timed the same
# way; prints the corpus table (benchmarks/corpus_table.py). On a host with several GPUs the
# entries run side by side, one GPU each.
#   usage: [BUDGET=2.5] [TIMEOUT=300] [GPUS=N] [FAST=0: no upstream-fast runs] bash benchmarks/corpus.sh [NAME ...]
# Each entry's directory holds its script (the one named in script.txt), gpu_args.txt and
# fast_args.txt (empty: the upstream has no fast settings of its own); {dir} in them is the
# entry's directory (the scripts run from a scratch cwd, where they write their checkpoints).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
REPO=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/tmp/corpus}; mkdir -p $W
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}; [[ $GPUS -ge 1 ]] || GPUS=1
names=("$@"); [[ ${#names[@]} -gt 0 ]] || names=($(ls benchmarks/corpus))

one() {  # NAME GPU
  local name=$1 gpu=$2 dir=$REPO/benchmarks/corpus/$1
  local script=$dir/$(cat $dir/script.txt) cwd=$W/cwd-$name
  mkdir -p $cwd; cd $cwd   # the scripts write checkpoints and data into their cwd
  export CUDA_VISIBLE_DEVICES=$gpu
  export TORCHINDUCTOR_CACHE_DIR=$W/inductor-$name TRITON_CACHE_DIR=$W/triton-$name
  local start=$(date +%s)
  # shellcheck disable=SC2046
  timeout -s INT ${TIMEOUT:-300} python3 -m advisor analyze --out $W/$name --budget ${BUDGET:-2.5} \
      $script $(sed "s#{dir}#$dir#g" $dir/gpu_args.txt) > $W/$name.log 2>&1
  echo "$name: analyze exit $? wall $(( $(date +%s) - start ))s" >> $W/$name.log
  if [[ -s $dir/fast_args.txt && ${FAST:-1} == 1 ]]; then
    timeout -s INT 180 python3 -m advisor analyze --no-trials --out $W/$name-fast \
        $script $(sed "s#{dir}#$dir#g" $dir/fast_args.txt) > $W/$name-fast.log 2>&1
  fi
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
i=0
for name in "${names[@]}"; do
  [[ -f benchmarks/corpus/$name/script.txt ]] || continue
  ( one $name $(( i % GPUS )) ) &
  i=$(( i + 1 ))
  if (( i % GPUS == 0 )); then wait; fi
done
wait
for name in "${names[@]}"; do tail -2 $W/$name.log 2>/dev/null; done
python3 benchmarks/corpus_table.py $W
tar -C $W -czf $OUT/corpus-runs.tar.gz --exclude='*/tb' --exclude='*/trials/*/outputs' --exclude='*/verify/tree' \
    --exclude='cwd-*' --exclude='inductor-*' --exclude='triton-*' .
ls -la $OUT
