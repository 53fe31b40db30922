#!/usr/bin/env bash
# How far can run-time fixes take the slow CIFAR example, and where does the tuned control
# stand? Plain python runs of the tuned example (eager and CUDA graphs), then `advisor analyze
# --no-trials --apply ...` of both examples with every fix the ladder could keep applied at once.
#   usage: bash benchmarks/ceiling_probe.sh   (writes $OUT/ceiling.tar.gz and $OUT/ceiling.txt)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/ceiling; rm -rf $W; mkdir -p $W
t0=$(date +%s)
say() { echo "[ceiling +$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader
EAGER=dataloader-workers:num_workers=8:pin_memory=true,channels-last,amp,fused-optimizer,set-to-none,cudnn-benchmark
for c in off reduce-overhead; do
  say "python cifar_resnet_tuned.py --compile $c"
  python3 examples/cifar_resnet_tuned.py --steps 77 --warmup-steps 29 --compile $c | tail -1
done
run() {  # name, then advisor options and the script
  local name=$1; shift
  say "analyze $name"
  python3 -m advisor analyze --no-trials --out $W/$name "$@" 2>&1 | grep -v '^epoch' | tail -45
}
run tuned examples/cifar_resnet_tuned.py
run tuned-ro examples/cifar_resnet_tuned.py --compile reduce-overhead
run slow-eager --apply $EAGER examples/cifar_resnet.py
run slow-eager-pre --apply $EAGER,precompute-samples examples/cifar_resnet.py
run slow-ro --apply $EAGER,precompute-samples,torch-compile:mode=reduce-overhead examples/cifar_resnet.py
run slow-default --apply $EAGER,precompute-samples,torch-compile:mode=default examples/cifar_resnet.py
say done
tar -C $W -czf $OUT/ceiling.tar.gz --exclude='*/tb' .
