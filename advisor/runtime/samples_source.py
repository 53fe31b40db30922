"""Every sample of a map-style Dataset, computed once over several forked processes, as source
text, torch-free. precompute-samples and preload-dataset compute each dataset[i] once before
training; one process doing it can take most of a trial's start-up, and the patch's
verification and the user's run pay it again. The trial executes this
text in the child (advisor/interventions/precompute.py) and the patch writes it into the script
(advisor/patch/loader_fixes.py): the one-off the trial measured is the user's.

Forked processes read the dataset as it stands (no pickling of it); each returns its chunk of
samples pickled by value, so no tensor travels through shared memory (tens of thousands of
them kept would each hold a mapping, past the kernel's limit on them). One process computes
them where that takes a few seconds (the first chunk, timed, tells), forking is unavailable,
or a sample lives on the GPU (CUDA cannot run in a forked child)."""

PROCESSES = 8      # at most; no more than the machine's CPUs
CHUNK = 512        # samples a task; the first is computed in the calling process, timed
SERIAL_S = 2.0     # the calling process computes them all where that would take less

EVERY_SAMPLE = f'''def _every_sample(dataset):
    """[dataset[i] for i in range(len(dataset))], computed over up to {PROCESSES} forked processes
    where one would take over {SERIAL_S:g} s (added by advisor: deterministic per-sample work only)."""
    import multiprocessing
    import os
    import pickle
    import time

    global _samples_of
    n = len(dataset)
    start = time.perf_counter()
    samples = [dataset[i] for i in range(min(n, {CHUNK}))]
    serial_s = (time.perf_counter() - start) * n / max(1, len(samples))
    # the cores this process may run on (taskset, a job's CPU binding), not the machine's
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    processes = min({PROCESSES}, cpus, n // {CHUNK})
    leaves = torch.utils._pytree.tree_leaves(samples[:1])
    on_gpu = any(isinstance(t, torch.Tensor) and t.device.type != "cpu" for t in leaves)
    if serial_s < {SERIAL_S:g} or processes < 2 or on_gpu or "fork" not in multiprocessing.get_all_start_methods():
        return samples + [dataset[i] for i in range(len(samples), n)]
    _samples_of = dataset
    try:
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            chunks = pool.imap(_sample_chunk, [(s, min(n, s + {CHUNK})) for s in range({CHUNK}, n, {CHUNK})])
            return samples + [sample for chunk in chunks for sample in pickle.loads(chunk)]
    except Exception:  # a sample that cannot be pickled, say: this process computes them, as it would have
        return samples + [dataset[i] for i in range(len(samples), n)]
    finally:
        _samples_of = None'''

SAMPLE_CHUNK = '''def _sample_chunk(bounds):
    """dataset[i] for i in range(*bounds), pickled by value (in a process _every_sample forked);
    a tensor that views a larger one is copied first, or its whole storage would travel with it."""
    import pickle

    torch.set_num_threads(1)
    chunk = [_samples_of[i] for i in range(*bounds)]
    chunk = torch.utils._pytree.tree_map_only(
        torch.Tensor, lambda t: t.clone() if t.untyped_storage().nbytes() > t.nbytes else t, chunk)
    return pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)'''


def processes(n: int, cpus: int) -> int:
    """The processes EVERY_SAMPLE computes n samples over on cpus CPUs (1: the calling one)."""
    return max(1, min(PROCESSES, cpus, n // CHUNK))


# the module-level definitions, in order (the patch inserts each as one statement)
DEFINITIONS = (EVERY_SAMPLE, SAMPLE_CHUNK)
SOURCE = "\n\n\n".join(DEFINITIONS)
