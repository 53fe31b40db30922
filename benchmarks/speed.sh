#!/usr/bin/env bash
# How long a whole analyze takes with default options, on one GPU and side by side on every GPU
# of the machine, against --budget 15 on one GPU; and a second analyze given the first's --cache.
# Each entry of benchmarks/corpus/ runs from a scratch cwd, as corpus.sh runs it. Prints the table
# (benchmarks/speed_table.py).
#   usage: [MODES="one all full fullall cache"] [TIMEOUT=600] bash benchmarks/speed.sh NAME ...
#   one:   default options, --trial-gpus 1, the entries side by side, one GPU and 1/GPUS of the
#          cores each (taskset); each given an
#          empty --cache DIR of its own (compiles as the default's run-directory cache does)
#   cache: as one, a second time with the same --cache DIR: it loads the graphs one compiled
#          (run it in the same call as one: the DIR is on the machine's disk)
#   all:   default options, every GPU for one entry at a time
#   full:  --budget 15 --trial-gpus 1, the entries side by side, one GPU each
#   fullall: --budget 15, every GPU for one entry at a time (the stack "all" is held to, on the
#          same machine: four analyzes sharing a host run their baselines slower)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
REPO=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/tmp/speed}; mkdir -p $W
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l); [[ $GPUS -ge 1 ]] || GPUS=1
names=("$@")

analyze() {  # MODE NAME GPU-LIST EXTRA...
  local mode=$1 name=$2 gpus=$3; shift 3
  local dir=$REPO/benchmarks/corpus/$name
  local cwd=$W/cwd-$mode-$name; mkdir -p $cwd; cd $cwd
  # shellcheck disable=SC2046
  CUDA_VISIBLE_DEVICES=$gpus ${PIN:-} timeout -s INT ${TIMEOUT:-600} python3 -m advisor analyze "$@" \
      $dir/$(cat $dir/script.txt) $(sed "s#{dir}#$dir#g" $dir/gpu_args.txt) >> $W/$mode-$name.log 2>&1
  echo "$mode $name: exit $?" >> $W/$mode-$name.log
}

side_by_side() {  # MODE EXTRA...: the entries at once, one GPU each and its share of the cores
  local mode=$1; shift
  local i=0 per=$(( $(nproc) / GPUS ))
  for name in "${names[@]}"; do
    local g=$(( i % GPUS ))
    # bound to 1/GPUS of the cores, as a one-GPU machine of the same kind has them (advisor sizes
    # loader workers and guesses for the cores it may run on: advisor/host.py)
    ( PIN="taskset -c $(( g * per ))-$(( g * per + per - 1 ))" \
      analyze $mode $name $g --out $W/$mode/$name "${@//\{name\}/$name}" ) &
    i=$(( i + 1 )); if (( i % GPUS == 0 )); then wait; fi
  done
  wait
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
all=$(seq -s, 0 $(( GPUS - 1 )))
for mode in ${MODES:-one all full cache}; do
  case $mode in
    one) side_by_side one --trial-gpus 1 --cache "$W/compile-cache/{name}" ;;
    cache) side_by_side cache-second --trial-gpus 1 --cache "$W/compile-cache/{name}" ;;
    full) side_by_side full --trial-gpus 1 --budget 15 ;;
    all) for name in "${names[@]}"; do analyze all $name $all --out $W/all/$name; done ;;
    fullall) for name in "${names[@]}"; do analyze fullall $name $all --out $W/fullall/$name --budget 15; done ;;
  esac
done
python3 $REPO/benchmarks/speed_table.py $W | tee $OUT/speed.md
tar -C $W -czf $OUT/speed-runs.tar.gz --exclude='*/tb' --exclude='*/trials/*/outputs' --exclude='*/verify/tree' \
    --exclude='cwd-*' --exclude='compile-cache' .
