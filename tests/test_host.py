"""The cores advisor sizes its work for are the ones the process may run on (a job's CPU binding,
taskset), not the machine's."""

import json
import os
import subprocess
import sys

import pytest

from advisor.fixes.dataloader_workers import DataloaderWorkers

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")

_PROBE = """
import json, os
os.sched_setaffinity(0, {0})
from advisor.host import usable_cpus
from advisor.interventions.dataloader import default_workers
from advisor.runner.environment import environment
print(json.dumps({"usable": usable_cpus(), "env": environment(None)["cpu_count"], "workers": default_workers()}))
"""


def test_a_process_bound_to_one_core_sees_one_core_and_sizes_its_loader_for_it():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == {"usable": 1, "env": 1, "workers": 2}   # two workers at least, not min(8, the machine's)


def test_the_workers_fix_tries_counts_for_the_bound_cores_the_environment_records():
    bound = DataloaderWorkers().candidates({}, {"gpu_count": 1, "cpu_count": 4})
    assert [c["params"]["num_workers"] for c in bound] == [2, 4]
    wide = DataloaderWorkers().candidates({}, {"gpu_count": 1, "cpu_count": 64})
    assert [c["params"]["num_workers"] for c in wide] == [4, 8]
