#!/usr/bin/env bash
# A recorded GPU run's fixes.patch written again by this checkout (benchmarks/repatch.py), then
# checked as plain python against the control (benchmarks/patch_check.sh), for each RUN_DIR.
#   usage: bash benchmarks/repatch_check.sh RUN_DIR...   (run from the repository root)
set -eu
for run in "$@"; do
  out=/tmp/repatch/$(basename "$(dirname "$run")")-$(basename "$run"); mkdir -p "$out"
  echo "#### $run (written again into $out/fixes.patch)"
  python3 benchmarks/repatch.py "$run" examples/cifar_resnet.py "$out/fixes.patch"
  bash benchmarks/patch_check.sh "$out"
done
