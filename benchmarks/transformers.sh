#!/usr/bin/env bash
# advisor analyze on the three transformer workloads, side by side on the machine's GPUs (one
# each), default options, the patch verified as plain python; then the fixes measured apart on
# request (float8-training, activation-checkpointing, liger-kernels); prints the table in
# tokens/s (benchmarks/transformers_table.py). The fixes that need torchao or liger-kernel say
# so and do not run where those are missing: carry their wheels with the others, e.g.
#   pip download torchao liger-kernel --no-deps --only-binary=:all: --python-version 3.12 \
#       --platform manylinux_2_28_x86_64 --platform any -d .whl
#   usage: [MODES="analyze apart"] [TIMEOUT=420] bash benchmarks/transformers.sh [NAME ...]
#   NAME: gpt2_trainer | nanogpt_manual | llama_eager (default: all three)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
REPO=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/tmp/transformers}; mkdir -p $W
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l); [[ $GPUS -ge 1 ]] || GPUS=1
names=("$@"); [[ ${#names[@]} -gt 0 ]] || names=(gpt2_trainer nanogpt_manual llama_eager)

workload() {  # NAME -> the script and its arguments
  case $1 in
    gpt2_trainer) echo "examples/gpt2_trainer_padded.py" ;;   # GPT-2 small, 512 tokens, ~70% padding
    nanogpt_manual) echo "examples/gpt_lm.py --attention manual --vocab-size 50304 --n-layer 12 --n-head 12 \
--n-embd 768 --block-size 1024 --batch-size 8 --grad-accum 4 --max-iters 300" ;;   # GPT-2 small, nanoGPT's loop
    llama_eager) echo "examples/llama_from_config.py" ;;   # 12 layers of 1024, 32,000-token vocabulary
  esac
}

analyze() {  # MODE NAME GPU EXTRA...
  local mode=$1 name=$2 gpu=$3; shift 3
  local cwd=$W/cwd-$mode-$name; mkdir -p $cwd; cd $cwd
  # shellcheck disable=SC2046
  CUDA_VISIBLE_DEVICES=$gpu timeout -s INT ${TIMEOUT:-420} python3 -m advisor analyze --trial-gpus 1 \
      --out $W/$mode/$name "$@" $(workload $name | sed "s#examples/#$REPO/examples/#") >> $W/$mode-$name.log 2>&1
  echo "$mode $name: exit $?" >> $W/$mode-$name.log
}

side_by_side() {  # MODE EXTRA...
  local mode=$1; shift
  local i=0
  for name in "${names[@]}"; do
    ( analyze $mode $name $(( i % GPUS )) "$@" ) &
    i=$(( i + 1 )); if (( i % GPUS == 0 )); then wait; fi
  done
  wait
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torchao" 2>/dev/null && echo "torchao: $(python3 -c 'import torchao; print(torchao.__version__)')"
python3 -c "import liger_kernel" 2>/dev/null && echo "liger-kernel: installed"
for mode in ${MODES:-analyze apart}; do
  case $mode in
    analyze) side_by_side analyze ;;
    apart) side_by_side apart --fix float8-training,activation-checkpointing,liger-kernels --no-verify ;;
  esac
done
python3 $REPO/benchmarks/transformers_table.py $W | tee $OUT/transformers.md
tar -C $W -czf $OUT/transformers-runs.tar.gz --exclude='*/tb' --exclude='*/trials/*/outputs' --exclude='*/verify/tree' \
    --exclude='cwd-*' .
