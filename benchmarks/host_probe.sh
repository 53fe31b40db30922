#!/usr/bin/env bash
# Where the host's time goes a step: the ladder's final stack against the tuned control, each
# run plainly (no runner: benchmarks/gpu_step_probe.py) and under advisor's runner
# (`advisor analyze --no-trials --apply`), every process watched by benchmarks/probe_site
# (host ms/step over steps PROBE_FROM-30..PROBE_FROM, then cProfile and the CUDA .item()
# callers over PROBE_STEPS steps). Where plain and runner differ, the runner costs host time;
# where the stack and the control differ, the run-time fixes do.
#   usage: OUT=/tmp/out bash benchmarks/host_probe.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; P=$OUT/probe; W=/tmp/host_probe; rm -rf $W $P; mkdir -p $W $P
STACK=${STACK:-dataloader-workers:num_workers=8:pin_memory=true,preload-dataset,channels-last,fused-optimizer,set-to-none,cudnn-benchmark,torch-compile:mode=reduce-overhead,amp:dtype=bfloat16,defer-syncs}
TIMING=${TIMING:---steps 24 --min-time 2}
export PROBE_FROM=${PROBE_FROM:-100} PROBE_STEPS=${PROBE_STEPS:-100}
probe() {  # name, command...
  local name=$1; shift
  echo "== $name"
  PROBE_OUT=$P/$name PYTHONPATH=$PWD/benchmarks/probe_site:$PYTHONPATH "$@" > $W/$name.log 2>&1
  echo "exit $?"
  grep -E "^PROBE|step time|throughput|Error" $W/$name.log | head -5
  for f in $P/$name/probe.*.txt; do [[ -e $f ]] && head -3 "$f" | tail -2; done
}
for round in $(seq 1 ${ROUNDS:-1}); do
  probe control-plain-$round python3 benchmarks/gpu_step_probe.py - examples/cifar_resnet_tuned.py --steps 300
  probe stack-plain-$round python3 benchmarks/gpu_step_probe.py "$STACK" examples/cifar_resnet.py --steps 300
  probe control-runner-$round python3 -m advisor analyze --no-trials $TIMING --out $W/control-runner-$round examples/cifar_resnet_tuned.py
  probe stack-runner-$round python3 -m advisor analyze --no-trials $TIMING --apply "$STACK" --out $W/stack-runner-$round examples/cifar_resnet.py
done
