"""Host-side probe of a training process, loaded by Python at start-up through PYTHONPATH:

    PROBE_OUT=/tmp/probe PYTHONPATH=benchmarks/probe_site:$PYTHONPATH python3 SCRIPT ...
    PROBE_OUT=/tmp/probe PYTHONPATH=benchmarks/probe_site:$PYTHONPATH python3 -m advisor analyze ...

Works the same with or without advisor's runner (its child process loads it too). Counted
from the optimizer's step post hook:
  * host wall time between steps PROBE_FROM-30 .. PROBE_FROM (no profiler), median;
  * cProfile over steps PROBE_FROM .. PROBE_FROM+PROBE_STEPS: the functions with the most
    own time, per step (cProfile slows Python calls, so compare runs, not absolute figures);
  * .item() calls on CUDA tensors over those steps, by caller (three frames).
One file per process in PROBE_OUT. Does nothing unless PROBE_OUT is set.
"""

import os

if os.environ.get("PROBE_OUT"):
    import collections
    import cProfile
    import io
    import pstats
    import statistics
    import sys
    import threading
    import time

    def _install():
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        out_dir = os.environ["PROBE_OUT"]
        start = int(os.environ.get("PROBE_FROM", "60"))
        n = int(os.environ.get("PROBE_STEPS", "100"))
        state = {"step": 0, "t": [], "items": collections.Counter(), "cpus": collections.Counter(), "done": False}

        def _cpu():  # the CPU the main thread last ran on (field 39 of its stat)
            try:
                with open("/proc/thread-self/stat") as fh:
                    return int(fh.read().rsplit(")", 1)[1].split()[36])
            except Exception:
                return -1
        prof = cProfile.Profile()
        orig_item = torch.Tensor.item

        def item(self):
            if start <= state["step"] < start + n and not self.is_cpu:
                f, chain = sys._getframe(1), []
                while f is not None and len(chain) < 3:
                    chain.append(f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}")
                    f = f.f_back
                state["items"][" < ".join(chain)] += 1
            return orig_item(self)
        torch.Tensor.item = item

        def write():
            s = io.StringIO()
            st = pstats.Stats(prof, stream=s)
            st.sort_stats("tottime").print_stats(35)
            host = [(b - a) * 1e3 for a, b in zip(state["t"], state["t"][1:])]
            with open(os.path.join(out_dir, f"probe.{os.getpid()}.txt"), "w") as fh:
                fh.write(f"argv {sys.argv}\n")
                if host:
                    fh.write(f"host ms/step over steps {start - 30}..{start}: median {statistics.median(host):.3f} "
                             f"mean {statistics.mean(host):.3f}; main thread on CPUs {dict(state['cpus'])}, "
                           f"{threading.active_count()} Python threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}\n")
                fh.write(f"cuda .item() calls over {n} steps:\n")
                for k, v in state["items"].most_common(10):
                    fh.write(f"  {v / n:.2f}/step {k}\n")
                fh.write(f"cProfile over {n} steps (tottime, cumtime in s for all {n}):\n")
                fh.write(s.getvalue())

        def after_step(opt, args, kwargs):
            if torch.compiler.is_compiling() or state["done"]:
                return
            state["step"] += 1
            k = state["step"]
            if start - 30 <= k <= start:
                state["t"].append(time.perf_counter())
                state["cpus"][_cpu()] += 1
            if k == start:
                prof.enable()
            elif k == start + n:
                prof.disable()
                state["done"] = True
                try:
                    write()
                except Exception as e:  # reported, never raised into the script
                    print(f"probe_site: not written: {e!r}", file=sys.stderr)
        register_optimizer_step_post_hook(after_step)

    try:
        os.makedirs(os.environ["PROBE_OUT"], exist_ok=True)
        _install()
    except Exception as e:  # a probe must not break the run it watches
        print(f"probe_site: not installed: {e!r}", file=sys.stderr)
