#!/usr/bin/env bash
# The dali fix on a GPU machine: advisor analyze on the ImageFolder example and on the corpus's
# ImageNet recipe over a folder of JPEGs, each ladder limited to DataLoader workers, DALI and
# the data-free ceiling, with the patch verified as plain python. Run directories go to $OUT.
# The ImageNet recipe runs at --lr 0.02: at its 0.1 the synthetic 10-class folder trains to a loss
# near 0 within 20 steps and then spikes (to 14 in the baseline), which the numerics check reads
# as divergence in whichever trial ends on a spike.
#   usage: bash benchmarks/dali.sh install | data | imagefolder | imagenet
# install: NVIDIA DALI from .dali/part* (split xz tarball of the nvidia-dali-cuda130 wheels'
#          files, for machines that cannot reach PyPI) into the interpreter's site-packages,
#          then a mixed-decoder smoke test; elsewhere: pip install 'advisor[dali-cuda13]'.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
REPO=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=${W:-/tmp/dali-bench}; mkdir -p "$W"
JPEGS=$W/jpegs            # imagefolder-data/ (the example's --out layout) and imagenet/{train,val}
N=${N:-20000}             # training JPEGs, 256 px, 10 classes
BUDGET=${BUDGET:-4}
FIXES=${FIXES:-dataloader-workers,amp,channels-last,dali,cached-batch}

keep() {  # RUN_DIR NAME: the run directory with its traces, in <= 15 MB parts
  tar -C "$(dirname "$1")" -czf "$W/$2.tar.gz" --exclude='*/trials/*/outputs' --exclude='*/verify/tree' \
      "$(basename "$1")"
  split -b 15M -d "$W/$2.tar.gz" "$OUT/$2.tar.gz."
}

case "${1:-}" in
install)
  SP=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if ! python3 -c 'import nvidia.dali' 2>/dev/null; then
    cat /tmp/dali/part* | xz -d | tar -x -C "$SP" || exit 1
  fi
  python3 - <<'EOF' || exit 1
import glob, os, numpy as np, torch
from PIL import Image
from nvidia.dali import fn, pipeline_def, types
from nvidia.dali.plugin.pytorch import DALIGenericIterator
import nvidia.dali
os.makedirs("/tmp/dali-smoke", exist_ok=True)
for i in range(8):
    Image.fromarray(np.random.default_rng(i).integers(0, 255, (256, 300, 3), dtype=np.uint8)).save(f"/tmp/dali-smoke/{i}.jpg")
files = sorted(glob.glob("/tmp/dali-smoke/*.jpg"))
@pipeline_def
def pipe():
    enc, lab = fn.readers.file(files=files, labels=list(range(8)), name="Reader")
    im = fn.decoders.image_random_crop(enc, device="mixed", output_type=types.RGB)
    im = fn.resize(im, resize_x=224, resize_y=224)
    return fn.crop_mirror_normalize(im, dtype=types.FLOAT, output_layout="CHW"), lab
it = DALIGenericIterator(pipe(batch_size=4, num_threads=4, device_id=0), ["x", "y"], reader_name="Reader")
b = next(iter(it))[0]
print("DALI", nvidia.dali.__version__, "smoke:", tuple(b["x"].shape), b["x"].device, b["y"].view(-1).tolist())
EOF
  ;;
data)
  python3 - "$JPEGS" "$N" <<'EOF'
import os, sys, time
sys.path.insert(0, "examples")
from imagefolder import generate_jpegs
root, n = sys.argv[1], int(sys.argv[2])
t0 = time.time()
generate_jpegs(os.path.join(root, "imagefolder-data"), n, 10, 256, 0)
generate_jpegs(os.path.join(root, "val"), 512, 10, 256, 1)
os.makedirs(os.path.join(root, "imagenet"), exist_ok=True)
for name, src in (("train", "imagefolder-data"), ("val", "val")):
    dst = os.path.join(root, "imagenet", name)
    if not os.path.exists(dst):
        os.symlink(os.path.join(root, src), dst)
print(f"{n} + 512 JPEGs in {root} ({time.time() - t0:.0f} s)")
EOF
  ;;
imagefolder)
  cd "$W" && timeout -s INT ${T:-580} python3 -m advisor analyze --out "$W/imagefolder" --budget "$BUDGET" --fix $FIXES \
      "$REPO/examples/imagefolder.py" --out "$JPEGS" --num-images "$N" > "$W/imagefolder.txt" 2>&1
  echo "analyze exit $?" >> "$W/imagefolder.txt"; tail -45 "$W/imagefolder.txt"; cp "$W/imagefolder.txt" "$OUT/"
  keep "$W/imagefolder" imagefolder
  ;;
imagenet)
  mkdir -p "$W/cwd" && cd "$W/cwd" && timeout -s INT ${T:-580} python3 -m advisor analyze --out "$W/imagenet" --budget "$BUDGET" \
      --fix $FIXES "$REPO/benchmarks/corpus/imagenet_examples/main.py" "$JPEGS/imagenet" -a resnet18 -b 256 --lr 0.02 \
      > "$W/imagenet.txt" 2>&1
  echo "analyze exit $?" >> "$W/imagenet.txt"; tail -45 "$W/imagenet.txt"; cp "$W/imagenet.txt" "$OUT/"
  keep "$W/imagenet" imagenet
  ;;
*) echo "usage: bash benchmarks/dali.sh install | data | imagefolder | imagenet" >&2; exit 2 ;;
esac
