"""samples/s of examples/slow_loader.py with num_workers=0 against --workers N, run as plain
python, back to back, several times. Each sample is mostly a sleep (standing in for I/O), so N
workers approach N times the rate even on a 2-core machine; on a shared machine other
processes can starve the workers for a moment, hence the repeats and the spread.

    python3 benchmarks/slow_loader_workers.py [--workers 2] [--repeats 3] [--steps 20] \\
        [--batch-size 16] [--sleep-ms 4] [--device cpu]

(This was tests/test_examples.py's "two workers are more than 1.3x faster": a figure, not
something a test on a busy machine can assert. The test keeps what is behaviour: the same
batches and losses with workers as without.)
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SLOW = Path(__file__).resolve().parents[1] / "examples" / "slow_loader.py"
RATE_RE = re.compile(r"([0-9.]+) samples/s")


def samples_per_s(workers: int, args) -> float:
    cmd = [sys.executable, str(SLOW), "--device", args.device, "--workers", str(workers), "--steps", str(args.steps),
           "--batch-size", str(args.batch_size), "--sleep-ms", str(args.sleep_ms), "--log-every", str(args.steps)]
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True).stdout
    done = [line for line in out.splitlines() if line.startswith("done:")]
    return float(RATE_RE.search(done[-1]).group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--sleep-ms", type=float, default=4.0)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()

    rows = []
    for i in range(args.repeats):
        serial, parallel = samples_per_s(0, args), samples_per_s(args.workers, args)
        rows.append((serial, parallel))
        print(f"pair {i + 1}: workers=0 {serial:8.1f} samples/s   workers={args.workers} {parallel:8.1f} samples/s   "
              f"{parallel / serial:.2f}x", flush=True)
    ratios = [b / a for a, b in rows]
    print(f"workers={args.workers} against none over {args.repeats} pairs: median {statistics.median(ratios):.2f}x "
          f"(min {min(ratios):.2f}x, max {max(ratios):.2f}x); batch {args.batch_size}, {args.steps} steps, "
          f"{args.sleep_ms:g} ms sleep a sample, device {args.device}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
