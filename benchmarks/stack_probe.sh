#!/usr/bin/env bash
# Run-time fix stacks against the tuned control, on one machine back to back: each stack is
# `advisor analyze --no-trials --apply STACK` on examples/cifar_resnet.py, timed like the
# ladder (--steps 24 --min-time 2), then the control. Prints step figures per run.
#   usage: STACKS="name=fix,fix;name2=..." bash benchmarks/stack_probe.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/work; rm -rf $W; mkdir -p $W
BASE=dataloader-workers:num_workers=8,torch-compile:mode=reduce-overhead,preload-dataset,amp,fused-optimizer
STACKS=${STACKS:-"all=$BASE,channels-last,set-to-none;all_defer=$BASE,channels-last,set-to-none,defer-syncs"}
T="--steps 24 --min-time 2 --no-trials"
t0=$(date +%s); say() { echo "[stack_probe +$(( $(date +%s) - t0 ))s] $*"; }
IFS=';' read -ra items <<< "$STACKS"
for it in "${items[@]}"; do
  name=${it%%=*}; stack=${it#*=}
  say "$name: $stack"
  python3 -m advisor analyze $T --apply "$stack" --out $W/$name examples/cifar_resnet.py > $W/$name.log 2>&1; echo "exit $?"
done
say control; python3 -m advisor analyze $T --out $W/control examples/cifar_resnet_tuned.py > $W/control.log 2>&1; echo "exit $?"
for r in ${items[@]%%=*} control; do
  python3 - "$W/$r" <<'PY'
import json, statistics as st, sys
d = json.load(open(sys.argv[1] + "/child.json"))
t = d["step_times_ms"]
print(sys.argv[1].rsplit("/", 1)[-1], f"steps {len(t)} mean {st.mean(t):.2f} median {st.median(t):.2f} ms",
      "window", round(d["measure_window_ms"] / max(1, len(t)), 2), "warm-up", [round(x) for x in d["warmup_step_times_ms"]],
      "notes", d["notes"][:3], "applied", len(d["interventions_applied"]))
PY
done
tar -C $W -czf $OUT/stack_probe.tar.gz --exclude='*.json.gz' --exclude='*.pt.trace.json' .
say done
