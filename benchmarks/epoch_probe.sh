#!/usr/bin/env bash
# Where does a stack of run-time fixes lose time against the tuned control? Profiles 30 steps
# (an epoch boundary of the GPU example's 24-step epochs inside) of:
#   A  an H100 ladder's kept stack (compile reduce-overhead, preload, bf16, fused SGD), with stacks
#   B  the same stack without compile (eager)
#   C  examples/cifar_resnet_tuned.py
# and prints each trace's step anatomy (benchmarks/step_anatomy.py).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/work; rm -rf $W; mkdir -p $W
STACK=${STACK:-dataloader-workers:num_workers=8,torch-compile:mode=reduce-overhead,preload-dataset,amp,fused-optimizer}
EAGER=${EAGER:-preload-dataset,amp,fused-optimizer}
T="--steps 24 --min-time 2 --profile-steps 30 --no-trials"
t0=$(date +%s); say() { echo "[epoch_probe +$(( $(date +%s) - t0 ))s] $*"; }
say A; TORCH_LOGS=recompiles python3 -m advisor analyze $T --with-stack --apply $STACK --out $W/A examples/cifar_resnet.py 2>&1 | grep -v "^epoch " | tail -40
say B; python3 -m advisor analyze $T --apply $EAGER --out $W/B examples/cifar_resnet.py 2>&1 | tail -15
say C; python3 -m advisor analyze $T --out $W/C examples/cifar_resnet_tuned.py 2>&1 | tail -15
for r in A B C; do
  say "anatomy $r"; python3 -c "import json; d=json.load(open('$W/$r/child.json')); print('step ms', [round(x,1) for x in d['step_times_ms']]); print('warm-up', [round(x) for x in d['warmup_step_times_ms']])"
  python3 benchmarks/step_anatomy.py $W/$r/tb/baseline/*.json* --top 25
done
tar -C $W -czf $OUT/epoch_probe.tar.gz --exclude='*.json.gz' --exclude='*.pt.trace.json' A B C
for r in A B C; do cp $W/$r/tb/baseline/*.json* $OUT/trace_$r.json.gz 2>/dev/null; done
say done; ls -la $OUT
