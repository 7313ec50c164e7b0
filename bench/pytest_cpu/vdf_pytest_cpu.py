"""Per-test CPU time (user + system, the test's process and the children it waited for), for
finding what makes `make test` long: on two cores that are busy throughout, the CPU a test costs
is time taken from the Molecule lane beside it, whatever its wall time.

    PYTHONPATH=bench/pytest_cpu .venv/bin/python -m pytest -n 2 --dist loadfile -p vdf_pytest_cpu
    .venv/bin/python bench/pytest_cpu/report.py     # the costliest tests and files

Each worker appends a line per test to bench/results/pytest-cpu/<worker>.jsonl (emptied by the
first test of a session that loads the plugin). Run by hand; no test loads it.
"""
import json
import os
import resource
import time
from pathlib import Path

import pytest

OUT = Path(__file__).resolve().parents[1] / "results" / "pytest-cpu"


def _cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def pytest_configure(config):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if worker == "main" and not hasattr(config, "workerinput") and OUT.is_dir():
        for old in OUT.glob("*.jsonl"):
            old.unlink()
    OUT.mkdir(parents=True, exist_ok=True)
    config._vdf_cpu_file = (OUT / f"{worker}.jsonl").open("a")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    own0, children0 = _cpu()
    wall0 = time.monotonic()
    yield
    own1, children1 = _cpu()
    item.config._vdf_cpu_file.write(json.dumps({
        "test": item.nodeid,
        "wall_s": round(time.monotonic() - wall0, 3),
        "own_cpu_s": round(own1 - own0, 3),
        "children_cpu_s": round(children1 - children0, 3),
    }) + "\n")
    item.config._vdf_cpu_file.flush()
