#!/usr/bin/env bash
# Does the fixes.patch a GPU ladder wrote work as code? Apply it to a copy of the example and run
# both as plain python (no advisor), back to back.
#   usage: [ROUNDS=1] bash benchmarks/patch_check.sh RUN_DIR   (e.g. reports/examples/cifar_resnet-h100)
set -eu
run=$1; W=/tmp/patch_check; rm -rf $W; mkdir -p $W
cp examples/cifar_resnet.py $W/
patch=$(realpath "$run/fixes.patch")  # RUN_DIR relative or absolute
(cd $W && git init -q && git apply "$patch")
git diff --no-index --stat examples/cifar_resnet.py $W/cifar_resnet.py || true
echo "== original";  python3 examples/cifar_resnet.py --steps 77 --warmup-steps 29 | tail -1
# The fast ones: their default 15 epochs (360 steps), the last 240 timed, ROUNDS times each
# (default 2), alternately. Each compiles its graph when the caches are cold (~30 s on an H100
# host): a time limit under ~170 s for this script gets its first round only.
for round in $(seq 1 ${ROUNDS:-2}); do
  echo "== patched ($round)";   python3 $W/cifar_resnet.py --warmup-steps 120 | tail -1
  echo "== tuned control ($round)"; python3 examples/cifar_resnet_tuned.py --warmup-steps 120 | tail -1
done
