#!/usr/bin/env bash
# The wild corpus on a GPU host (benchmarks/wild.py): each entry at its real size with synthetic
# data, `advisor analyze` with default options but --budget, and beside it the authors' own fast
# settings timed the same way (--no-trials), each after a plain-python check. On a host with
# several GPUs the entries run side by side, one GPU each (a slot per GPU, round robin).
#   usage: [BUDGET=75] [GPUS=N] [OUT=/tmp/out] bash benchmarks/wild.sh [NAME ...]   (default: the gpu_pick entries)
# The scripts' code is not in the repository: run `python3 benchmarks/wild.py fetch` here first
# and carry benchmarks/wild/src (about 20 MiB) to the GPU host (the device call's carry). Each
# entry takes about BUDGET + 150 s in its slot (stand-in data, 25 s of plain python, the analyze
# and its verification, the fast run); the run directories (less traces and trees) and the
# scoreboard come back under $OUT. A device call is limited to 10 minutes, so:
#   on 8 GPUs, the nine gpu_pick entries in one call (two in slot 0):   bash benchmarks/wild.sh
#   on 4 GPUs, two calls of 4-5 entries each:
#     bash benchmarks/wild.sh timm_train simclr_sthalles unet_carvana resnet_cifar10_akamaster pytorch_gan_dcgan
#     bash benchmarks/wild.sh mingpt_chargpt examples_word_language_model lightning_fabric_mnist mindiffusion_superminddpm
#   on one GPU, two entries a call (BUDGET=60).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export WILD_WORK=${WILD_WORK:-/tmp/wild-work} WILD_RUNS=${WILD_RUNS:-/tmp/wild-runs}
GPUS=${GPUS:-$(nvidia-smi -L 2>/dev/null | wc -l)}; [[ $GPUS -ge 1 ]] || GPUS=1
names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
  mapfile -t names < <(python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import wild
print('\n'.join(e.name for e in wild.load_manifest() if e.gpu_pick))")
fi
[[ -d benchmarks/wild/src ]] || { echo "benchmarks/wild/src is missing: carry it (python3 benchmarks/wild.py fetch)"; exit 2; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"

slot() {  # SLOT NAME...
  local s=$1; shift
  CUDA_VISIBLE_DEVICES=$s WILD_WORK=$WILD_WORK/slot$s \
    python3 benchmarks/wild.py run --device gpu --fast --budget "${BUDGET:-75}" --plain-timeout "${PLAIN:-25}" \
      --scoreboard "$OUT/board-slot$s.json" "$@" > "$OUT/wild-slot$s.log" 2>&1
}
for ((s = 0; s < GPUS; s++)); do
  mine=()
  for ((i = s; i < ${#names[@]}; i += GPUS)); do mine+=("${names[$i]}"); done
  [[ ${#mine[@]} -gt 0 ]] && slot $s "${mine[@]}" &
done
wait
cat "$OUT"/wild-slot*.log
python3 benchmarks/wild.py merge "$OUT"/board-slot*.json --scoreboard "$OUT/scoreboard-gpu.json"
python3 benchmarks/wild.py table --scoreboard "$OUT/scoreboard-gpu.json"
tar -C "$WILD_RUNS" -czf "$OUT/wild-runs.tar.gz" --exclude='*/tb' --exclude='*.pt.trace.json*' --exclude='*/trials/*/outputs' \
    --exclude='*/verify/tree' --exclude='*/traces' . 2>/dev/null
ls -la "$OUT"
