#!/usr/bin/env bash
# One run on a GPU machine: extra fixture traces, then `advisor analyze` on the slow and tuned
# CIFAR examples (diagnosis only), then the slow example with trials. Everything it keeps is
# packed into $OUT (at most 8 files are copied back from the machine).
#   usage: bash benchmarks/gpu_examples.sh [fixtures] [diagnose] [trials]
# Environment: DIAGNOSE (examples to diagnose), TRIALS_BUDGET (minutes), TRIALS_TIMEOUT (s),
# TRIALS_EXAMPLE (default cifar_resnet).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/work; rm -rf $W; mkdir -p $W  # a warm machine keeps the last invocation's runs
steps=${@:-fixtures diagnose trials}
# Windows of whole epochs (the examples' GPU epoch is 24 steps; the committed GPU figures were
# timed so) and at least 2 s, so a host hiccup weighs little against 5-20 ms steps.
TIMING=${TIMING:---steps 24 --min-time 2}
t0=$(date +%s)
say() { echo "[gpu_examples +$(( $(date +%s) - t0 ))s] $*"; }
# FRESH_CACHES=1: each analyze compiles with empty Inductor and Triton caches, as on a machine
# that never compiled the script (a warm machine keeps /tmp/torchinductor_$USER between runs,
# and the control's compile would warm the ladder's last graph).
fresh() { [[ ${FRESH_CACHES:-0} == 1 ]] && export TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d); true; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"

if [[ $steps == *fixtures* ]]; then
  say "fixture traces"
  python3 tests/fixtures/record_gpu_traces.py --out $W/rec --summary $OUT/summary_extra.json \
      --configs gpu_resident_resnet50_cl,near_capacity
  tar -C $W/rec/trimmed -czf $OUT/fixtures_extra.tar.gz .
fi

if [[ $steps == *diagnose* ]]; then
  for ex in ${DIAGNOSE:-cifar_resnet cifar_resnet_tuned}; do
    say "analyze $ex --no-trials"
    fresh
    python3 -m advisor analyze --no-trials $TIMING --out $W/$ex examples/$ex.py
    echo "exit $?"
  done
  tar -C $W -czf $OUT/diagnose.tar.gz ${DIAGNOSE:-cifar_resnet cifar_resnet_tuned}
fi

if [[ $steps == *trials* ]]; then
  ex=${TRIALS_EXAMPLE:-cifar_resnet}
  say "analyze $ex with trials"
  fresh
  start=$(date +%s)
  timeout -s INT ${TRIALS_TIMEOUT:-540} python3 -m advisor analyze $TIMING --out $W/trials --budget ${TRIALS_BUDGET:-6} examples/$ex.py
  echo "exit $? wall $(( $(date +%s) - start ))s"
  python3 benchmarks/trials_figures.py $W/trials
  # the documents and report in one archive, the trials' traces in another (size)
  tar -C $W -czf $OUT/trials.tar.gz --exclude='trials/tb' trials
  tar -C $W -czf $OUT/trials_tb.tar.gz trials/tb
fi
say "done"
ls -la $OUT
