#!/usr/bin/env bash
# The sandbox on a GPU machine: which sandbox the processes after the baseline get there, CUDA
# inside the copy-on-write view (device nodes passed through), and a whole `advisor analyze`
# with trials (torch.compile among them: Inductor and Triton caches kept real) and the patch's
# verification, on a script that deletes, renames and overwrites files as trainers do. A watcher
# hashes the user's files before and after; only the baseline may change them.
#   usage: bash benchmarks/sandbox_gpu.sh   (writes $OUT/sandbox_gpu.json and both runs' run.json)
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
REPO=$PWD
W=/tmp/sandbox_gpu; rm -rf $W; mkdir -p $W/proj $W/home $W/outside
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
say() { echo "[sandbox_gpu] $*"; }
say "the jail alone: its kind and CUDA inside it"
python3 advisor/runner/jail.py --root $W -- /usr/bin/env python3 -c "
import os, torch
print('kind', os.environ.get('ADVISOR_SANDBOX'), os.environ.get('ADVISOR_SANDBOX_WHY'))
x = torch.randn(4096, 4096, device='cuda'); print('cuda inside', torch.cuda.get_device_name(0), float((x @ x).sum()) == float((x @ x).sum()))
"
for d in $W/proj $W/home $W/outside; do
  for n in 1 2 3; do echo s$n > $d/scratch-$n.txt; echo o$n > $d/old-$n.txt; echo u$n > $d/sub-$n.txt; mkdir -p $d/cache-$n; echo c > $d/cache-$n/x; done
  echo "the user's log" > $d/log.txt
done
cp examples/cifar_resnet.py $W/proj/train_gpu.py
cp tests/fixtures/scripts/mutating_train.py $W/proj/mutate.py
# the GPU trainer, preceded by the file changes of the mutating script (run as a module import)
cat > $W/proj/train.py <<'PY'
import runpy, sys
argv = sys.argv[1:]
sep = argv.index("--")
sys.argv = ["mutate.py", *argv[:sep], "--shell", "--steps", "0"]
runpy.run_path("mutate.py", run_name="__main__")
sys.argv = ["train_gpu.py", *argv[sep + 1:]]
runpy.run_path("train_gpu.py", run_name="__main__")
PY
snap() { (cd $W && find proj home outside -path '*/__pycache__' -prune -o \( -type f -o -type l \) -print0 | sort -z | xargs -0 sha256sum 2>/dev/null; find proj home outside -type l -printf '%p -> %l\n' | sort); }
snap > $W/before.txt
say "advisor analyze with trials (amp, channels-last, torch.compile) and the verification"
cd $W/proj
HOME=$W/home timeout 900 python3 -m advisor analyze --out $W/run --steps 24 --min-time 2 --budget 4 \
  --fix amp,channels-last,torch-compile train.py . $W/home $W/outside -- 2>&1 | grep -v '^epoch' | tail -40
echo "exit $?"
say "advisor analyze --apply channels-last,amp --no-trials: the patch's verification, sandboxed"
HOME=$W/home timeout 600 python3 -m advisor analyze --out $W/run2 --steps 24 --min-time 2 --no-trials \
  --apply channels-last,amp train.py . $W/home $W/outside -- 2>&1 | grep -v '^epoch' | tail -8
echo "exit $?"
cd $REPO
snap > $W/after.txt
diff $W/before.txt $W/after.txt > $W/diff.txt; say "user's files changed (the baseline's own changes expected):"; cat $W/diff.txt
python3 - $W <<'PY'
import json, sys, pathlib
w = pathlib.Path(sys.argv[1])
doc = json.loads((w / "run" / "run.json").read_text())
doc2 = json.loads((w / "run2" / "run.json").read_text())
log = (w / "proj" / "log.txt").read_text().splitlines()
out = {"device": doc["environment"].get("gpu_name") or doc["environment"].get("device"),
       "sandbox_kind": (doc.get("sandbox") or {}).get("kind"),
       "processes": sorted((doc.get("sandbox") or {}).get("processes", {})),
       "log_lines_after": log, "baseline_writes_only": len(log) == 3,   # the user's line + 2 baselines
       "trials": [{k: t.get(k) for k in ("name", "status", "speedup_vs_baseline", "samples_per_s", "reason")} for t in doc["trials"]],
       "verification": {k: (doc2.get("patch") or {}).get("verification", {}).get(k)
                        for k in ("status", "samples_per_s", "speedup_vs_baseline", "of_stack", "runs", "checks")},
       "verification_sandbox": doc2.get("sandbox"),
       "user_files_diff": (w / "diff.txt").read_text().splitlines()}
(pathlib.Path(sys.argv[1]) / "summary.json").write_text(json.dumps(out, indent=1))
print(json.dumps(out, indent=1))
PY
cp $W/summary.json $OUT/sandbox_gpu.json; cp $W/run/run.json $OUT/trials-run.json; cp $W/run2/run.json $OUT/verify-run.json
