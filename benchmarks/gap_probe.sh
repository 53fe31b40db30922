#!/usr/bin/env bash
# The ladder's final stack against the tuned control without advisor's runner:
# benchmarks/gpu_step_probe.py (host ms and GPU ms a step, first 30 steps left out) on the slow
# example with the run-time fixes, and on the control with none, alternately. Where the two
# differ here, the run-time fixes cost host time; where they do not, advisor's hooks do.
# PROBES: "name=FIXES" items separated by ';' (FIXES in --apply syntax).
#   usage: ROUNDS=2 bash benchmarks/gap_probe.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
BASE=dataloader-workers:num_workers=8:pin_memory=true,preload-dataset,channels-last,fused-optimizer,set-to-none,cudnn-benchmark,torch-compile:mode=reduce-overhead,amp:dtype=bfloat16
PROBES=${PROBES:-"stack=$BASE;stack_defer=$BASE,defer-syncs"}
ARGS=${ARGS:---steps 300 --log-every 10}
IFS=';' read -ra items <<< "$PROBES"
for round in $(seq 1 ${ROUNDS:-2}); do
  for it in "${items[@]}"; do
    name=${it%%=*}; fixes=${it#*=}
    echo "== round $round $name"
    python3 benchmarks/gpu_step_probe.py "$fixes" examples/cifar_resnet.py $ARGS 2>&1 | grep -E "^PROBE|Error" | sed "s/^PROBE [^:]*:/PROBE $name:/"
  done
  echo "== round $round control"
  python3 benchmarks/gpu_step_probe.py - examples/cifar_resnet_tuned.py $ARGS 2>&1 | grep -E "^PROBE|Error" | sed "s/^PROBE -:/PROBE control:/"
done
