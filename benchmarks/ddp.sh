#!/usr/bin/env bash
# The ddp fix and the NCCL fixtures on a machine with 2 GPUs. Run directories and traces go to $OUT.
#   usage: bash benchmarks/ddp.sh fixtures | single | dataparallel | imagenet | pergpu
# fixtures:     tests/fixtures/record_ddp_traces.py under torchrun (2 ranks, NCCL): the exposed and
#               the straggler scenarios, each rank's trace trimmed to its last step.
# single:       advisor analyze --fix ddp on examples/resnet_single_gpu.py (ResNet-50, one GPU)
# dataparallel: the same with --data-parallel (nn.DataParallel over every GPU)
# pergpu:       single, with the batch-size trials too: measured apart on top of the kept ddp,
#               x2 is DDP with the per-GPU batch kept (256 a GPU)
# imagenet:     the corpus's PyTorch ImageNet example (its model in nn.DataParallel when given no
#               --gpu) over 30,000 synthetic 256 px JPEGs (benchmarks/dali.sh data), ResNet-50,
#               batch 256, 12 workers, --lr 0.02 (see benchmarks/dali.sh)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
REPO=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/tmp/ddp-bench}; mkdir -p "$W"
BUDGET=${BUDGET:-4}

keep() {  # RUN_DIR NAME: the run directory with its traces
  tar -C "$(dirname "$1")" -czf "$OUT/$2.tar.gz" --exclude='*/trials/*/outputs' --exclude='*/verify/tree' \
      "$(basename "$1")"
}

analyze() {  # NAME SCRIPT ARGS...: one advisor analyze from a scratch working directory
  local name=$1; shift
  mkdir -p "$W/cwd-$name" && cd "$W/cwd-$name" && timeout -s INT ${T:-580} python3 -m advisor analyze \
      --out "$W/$name" --budget "$BUDGET" --fix ${FIXES:-ddp} "$@" > "$W/$name.txt" 2>&1
  echo "analyze exit $?" >> "$W/$name.txt"; tail -60 "$W/$name.txt"; cp "$W/$name.txt" "$OUT/"
  keep "$W/$name" "$name"
}

case "${1:-}" in
fixtures)
  nvidia-smi topo -m | head -4
  timeout 300 python3 -m torch.distributed.run --standalone --nproc-per-node 2 \
      tests/fixtures/record_ddp_traces.py --out "$OUT/nccl" 2>&1 | grep -v "^\*\|OMP_NUM_THREADS"
  ;;
single) analyze single "$REPO/examples/resnet_single_gpu.py" ;;
dataparallel) analyze dataparallel "$REPO/examples/resnet_single_gpu.py" --data-parallel ;;
pergpu) FIXES=ddp,batch-size analyze pergpu "$REPO/examples/resnet_single_gpu.py" ;;
imagenet)
  N=${N:-30000} W=/tmp/dali-bench bash "$REPO/benchmarks/dali.sh" data
  analyze imagenet "$REPO/benchmarks/corpus/imagenet_examples/main.py" /tmp/dali-bench/jpegs/imagenet \
      -a resnet50 -b 256 -j 12 --lr 0.02
  ;;
*) echo "usage: bash benchmarks/ddp.sh fixtures | single | dataparallel | imagenet | pergpu" >&2; exit 2 ;;
esac
