"""A pool worker ends with the process that started it (`grpo_ext.experiments.workers.end_with`): a study or an
iterative experiment killed with SIGTERM leaves no worker training into the folders that its restart writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from grpo_ext.experiments.workers import running as _alive

# The experiment: a pool of one worker (the study's forkserver, or the iterative experiment's spawn), asked for its
# pid, then a minute's job; the test kills the experiment's process while that job runs.
SCRIPT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
from grpo_ext.experiments.workers import end_with

method, watched = sys.argv[1], sys.argv[2] == "watched"
context = multiprocessing.get_context(method)
kwargs = {"initializer": end_with, "initargs": (os.getpid(), 0.1)} if watched else {}
with ProcessPoolExecutor(max_workers=1, mp_context=context, **kwargs) as pool:
    print(pool.submit(os.getpid).result(), flush=True)
    pool.submit(time.sleep, 60).result()
"""


def _worker_after_sigterm(method: str, watched: bool) -> tuple[int, bool]:
    parent = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, method, "watched" if watched else "plain"], stdout=subprocess.PIPE, text=True
    )
    try:
        worker = int(parent.stdout.readline())
        time.sleep(0.5)  # the minute's job has started
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        return worker, _alive(worker)
    finally:
        parent.kill()


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_worker_ends_when_the_experiment_is_killed(method):
    worker, alive = _worker_after_sigterm(method, watched=True)
    assert not alive, f"worker {worker} outlived its experiment"


def test_without_the_watch_the_worker_outlives_the_experiment():
    """The case the watch is for (so the test above can fail): an unwatched worker keeps running its job."""
    worker, alive = _worker_after_sigterm("forkserver", watched=False)
    try:
        assert alive
    finally:
        if _alive(worker):
            os.kill(worker, signal.SIGKILL)
