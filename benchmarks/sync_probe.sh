#!/usr/bin/env bash
# What separates the slow CIFAR recipe, with every run-time fix advisor keeps, from the tuned
# one? One machine, back to back: the kept stack of an H100 ladder (A) plus the fixes that ladder ran
# out of budget for (B), B on a copy of the script with ADV110's edit made by hand (the loss
# read with .item() only on log steps, as the tuned recipe does; C), and the tuned recipe (D).
#   usage: bash benchmarks/sync_probe.sh   (writes $OUT/sync_probe.txt and $OUT/sync_probe.tar.gz)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=/tmp/sync_probe; rm -rf $W; mkdir -p $W/nosync
A=dataloader-workers:num_workers=8:pin_memory=true,torch-compile:mode=reduce-overhead,preload-dataset,amp,fused-optimizer,cudnn-benchmark
B=$A,set-to-none,channels-last
# ADV110's fix by hand: no per-step loss.item() (the running average is read on log steps)
sed -e 's/^\( *\)running_loss += loss.item()/\1running_loss += loss.detach()/' \
    -e 's/^\( *\)last_loss = loss.item()/\1pass/' \
    -e 's/loss {last_loss:.4f} "/loss {loss.item():.4f} "/' \
    -e 's/avg_loss {running_loss \/ (i + 1):.4f}/avg_loss {float(running_loss) \/ (i + 1):.4f}/' \
    examples/cifar_resnet.py > $W/nosync/cifar_resnet.py
diff examples/cifar_resnet.py $W/nosync/cifar_resnet.py
run() { local name=$1; shift; echo "== $name"; python3 -m advisor analyze --no-trials --out $W/$name "$@" 2>&1 | grep -E "^(step time|throughput|GPU busy|status|applied)" ; }

run B-all --apply $B examples/cifar_resnet.py
run C-all-nosync --apply $B $W/nosync/cifar_resnet.py
run D-tuned examples/cifar_resnet_tuned.py
tar -C $W -czf $OUT/sync_probe.tar.gz --exclude='*/tb' .
