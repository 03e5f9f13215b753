"""The quick variant of the iterative experiment, as a user runs it: `scripts/iterative.py --config
configs/iterative_quick.yaml` (three arms, two seeds, two worker processes on the embedded model), killed with
SIGKILL once an iteration is saved, then started again with the same command: it finishes without redoing the
saved iteration, and the worker processes of the killed run are gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest


def _command(python, run_dir):
    return [python, "scripts/iterative.py", "--config", "configs/iterative_quick.yaml", "--output_dir", str(run_dir)]


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(state) and not state.startswith("Z")


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory, python, root):
    run_dir = tmp_path_factory.mktemp("quick") / "run"
    saved = run_dir / "seed_0" / "iterative" / "iterative_state.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        _command(python, run_dir), cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 600
    workers: list[int] = []
    while not saved.is_file():  # the first finished iteration of an arm
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no iteration finished in 10 minutes"
        workers = _children(proc.pid) or workers
        time.sleep(0.5)
    workers = [w for w in _children(proc.pid) if w not in workers] + workers
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    first = json.loads(saved.read_text())
    stamp = (run_dir / "seed_0" / "iterative" / "iter_1" / "policy" / "model.safetensors").stat().st_mtime_ns
    time.sleep(3)  # the workers poll their parent every second
    orphans = [w for w in workers if _alive(w)]
    resumed = subprocess.run(_command(python, run_dir), cwd=root, env=env, capture_output=True, text=True, timeout=900)
    return {"run_dir": run_dir, "first": first, "stamp": stamp, "orphans": orphans, "resumed": resumed}


def test_quick_variant_resumes_after_a_kill(killed_and_resumed):
    r = killed_and_resumed
    assert r["resumed"].returncode == 0, r["resumed"].stdout[-3000:] + r["resumed"].stderr[-3000:]
    assert r["orphans"] == []  # the killed run's workers ended with it
    run_dir = r["run_dir"]
    final = json.loads((run_dir / "seed_0" / "iterative" / "iterative_state.json").read_text())
    assert final["iteration"] == 2
    assert final["history"][: r["first"]["iteration"] + 1] == r["first"]["history"]  # saved rows kept as they were
    policy_1 = run_dir / "seed_0" / "iterative" / "iter_1" / "policy" / "model.safetensors"
    assert policy_1.stat().st_mtime_ns == r["stamp"]  # and its policy not trained again
    assert "resuming" in r["resumed"].stdout


def test_quick_variant_reports_three_arms_and_two_seeds(killed_and_resumed):
    report = killed_and_resumed["run_dir"] / "report"
    payload = json.loads((report / "report.json").read_text())
    assert {arm: sorted(runs) for arm, runs in payload["rows"].items()} == {
        arm: ["0", "1"] for arm in ("iterative", "frozen", "verifier")
    }
    for runs in payload["rows"].values():
        for rows in runs.values():
            assert [row["iteration"] for row in rows] == [0, 1, 2]
            assert all(0 <= row["pass@1"] <= 1 for row in rows)
    iterative = payload["rows"]["iterative"]["0"][2]
    assert 0 <= iterative["rm_auc_before"] <= 1 and 0 <= iterative["rm_auc_after"] <= 1  # step-level AUC
    assert iterative["training_curve"] and "verifier_steps" in iterative["training_curve"][0]
    assert len(payload["summary"]["targets"]) == 2 and (report / "iterative.png").stat().st_size > 10_000
    assert "| **iterative** | mean |" in (report / "report.md").read_text()
