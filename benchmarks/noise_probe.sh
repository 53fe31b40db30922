#!/usr/bin/env bash
# Run-to-run noise of the loader-bound example, plainly (no advisor), one process after
# another: each run's host ms/step over steps 40..70 and the CPUs its main thread ran on
# (benchmarks/probe_site), alternating the environments in VARIANTS ('-' = as is), with the
# host's CPU topology first. Do per-process speed levels follow the CPU the thread lands on,
# or the OpenMP threads' spin-waiting?
#   usage: RUNS=3 VARIANTS="- OMP_WAIT_POLICY=PASSIVE" bash benchmarks/noise_probe.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
P=/tmp/noise_probe; rm -rf $P; mkdir -p $P
echo "cores: $(nproc); siblings: $(cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort -u | tr '\n' ' ')"
echo "numa: $(cat /sys/devices/system/node/node*/cpulist 2>/dev/null | tr '\n' ' ')"
export PROBE_FROM=70 PROBE_STEPS=1
read -ra variants <<< "${VARIANTS:--}"
for run in $(seq 1 ${RUNS:-3}); do
  for v in "${variants[@]}"; do
    d=$P/$run-${v//[^A-Za-z0-9]/_}
    if [[ $v == - ]]; then envs=(); else envs=("$v"); fi
    env "${envs[@]}" PROBE_OUT=$d PYTHONPATH=$PWD/benchmarks/probe_site:$PYTHONPATH \
      python3 examples/cifar_resnet.py --steps 72 ${ARGS:-} > $d.log 2>&1
    echo "run $run [$v]: $(grep -h '^host' $d/probe.*.txt 2>/dev/null || tail -1 $d.log)"
  done
done
