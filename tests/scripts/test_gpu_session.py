"""scripts/gpu_session.py, the GPU session's driver (issue 49.4), on the CPU: its parts and their commands, the budget
that decides what runs and what is left for a next call, the hard limit, and a real CPU rehearsal of one part."""

import json
import tarfile
import time

import pytest

from benchmarks import _gpu
from scripts import gpu_check, gpu_session


def test_parts_are_named_checked_and_run_after_setup():
    assert gpu_session.parse_parts(None) == list(gpu_session.DEFAULT_PARTS)
    assert gpu_session.DEFAULT_PARTS[0] == "setup"
    assert set(gpu_session.DEFAULT_PARTS) == {
        "setup",
        "qlora_step",
        "lora_step",
        "ext_adaptive_kl",
        "ext_sampler",
        "gpu_config",
    }  # fmt: skip  (issue 49.6)
    assert gpu_session.parse_parts("gpu_config, lora_step,setup,gpu_config") == ["setup", "gpu_config", "lora_step"]
    with pytest.raises(ValueError, match=r"unknown part\(s\) \['ext_adaptive'\]; the parts are: setup, qlora_step"):
        gpu_session.parse_parts("ext_adaptive,gpu_config")
    assert set(gpu_session.all_parts()) == {"setup", "qlora_step", "lora_step", "tests",
                                            *gpu_session.CHECK_STEPS}  # fmt: skip


def test_an_unknown_part_is_refused_with_the_list(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_session.main(["--parts", "qlora", "--out", "unused"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--parts: unknown part(s) ['qlora']" in err and "qlora_step, lora_step" in err


def test_consecutive_smoke_check_steps_share_one_gpu_check_call():
    parts = ["qlora_step", "ext_sampler", "lora_step", "ext_adaptive_kl", "gpu_config", "tests"]
    assert gpu_session.groups(parts) == [["qlora_step"], ["ext_sampler"], ["lora_step"],
                                         ["ext_adaptive_kl", "gpu_config"], ["tests"]]  # fmt: skip
    # a gpu_check call needs its shortest step and, the first time, the policy prepared
    assert gpu_session.group_estimate(["ext_adaptive_kl", "gpu_config"], prepared=True) == 34
    assert gpu_session.group_estimate(["gpu_config"], prepared=False) == 168 + 35
    assert gpu_session.group_estimate(["qlora_step"], prepared=False) == 200


def test_commands_of_the_parts(tmp_path):
    qlora = gpu_session.command(["qlora_step"], cpu=False, reps=3, budget_left=400)
    assert qlora[:2] == ["-m", "benchmarks.gpu_step"] and "--device" not in qlora
    flags = dict(zip(qlora[2::2], qlora[3::2], strict=True))
    assert flags == {"--shapes": "1.5b", "--kinds": "qlora", "--variants": "off,sampler", "--reps": "3",
                     "--results-dir": "outputs/gpu_session/qlora_step"}  # fmt: skip
    lora = gpu_session.command(["lora_step"], cpu=True, reps=2, budget_left=None, scratch=tmp_path)
    flags = dict(zip(lora[2::2], lora[3::2], strict=True))
    assert flags["--shapes"] == "tiny" and flags["--device"] == "cpu" and flags["--variants"] == "static,sampler"
    assert flags["--results-dir"] == str(tmp_path / "lora_step")

    check = gpu_session.command(["ext_adaptive_kl", "gpu_config"], cpu=False, reps=3, budget_left=123.4)
    assert check[0] == "scripts/gpu_check.py" and "--rehearse-on-cpu" not in check
    flags = dict(zip(check[1::2], check[2::2], strict=False))
    assert flags["--only"] == "ext_adaptive_kl,gpu_config" and flags["--budget"] == "123"
    assert {"--keep-models", "--reuse-prepared"} <= set(check)
    assert gpu_check.main([*check[1:], "--list"]) == 0  # gpu_check's parser takes every flag the driver gives
    assert gpu_session.command(["tests"], cpu=False, reps=3, budget_left=None)[-2:] == list(gpu_session.TESTS)
    assert all((gpu_check.ROOT / t).is_file() for t in gpu_session.TESTS)


def test_list_and_dry_run_print_every_part_with_its_command(capsys):
    assert gpu_session.main(["--list"]) == 0
    listed = capsys.readouterr().out
    for name in gpu_session.all_parts():
        assert f" {name} " in listed
    assert "$ python -m benchmarks.gpu_step --shapes 1.5b --kinds qlora --variants off,sampler" in listed
    assert gpu_session.main(["--dry-run", "--parts", "gpu_config"]) == 0
    printed = capsys.readouterr().out
    assert "scripts/gpu_check.py --only gpu_config" in printed and "qlora_step" not in printed


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_budget_decides_what_runs_and_names_what_is_left(tmp_path, monkeypatch, capsys):
    """Every part takes its H100 estimate on a fake clock; a gpu_check call skips what its own budget excludes."""
    clock, calls = FakeClock(), []
    monkeypatch.setattr(gpu_session, "clock", clock)

    def setup(wheels, log):
        clock.now += 30
        return {"packages_problem": None, "versions": "torch 2.11.0", "wheels_installed": False,
                "device": {"name": "NVIDIA H100 80GB HBM3"}}  # fmt: skip

    def run_part(session, name, argv, timeout):
        calls.append((name, argv, timeout))
        clock.now += gpu_session.all_parts()[name].h100_seconds
        session.add(name, "pass", gpu_session.all_parts()[name].h100_seconds, result=f"{name}.json")

    def run_checks(session, group, argv, timeout):
        calls.append((",".join(group), argv, timeout))
        budget = float(argv[argv.index("--budget") + 1])
        spent = 0 if calls[-1][0] != "ext_sampler" else 35  # the first call prepares
        for step in group:
            need = gpu_check.H100_SECONDS[step]
            if spent + need <= budget:
                spent += need
                session.add(step, "pass", need)
            else:
                session.add(step, "skipped", 0.0, why="over --budget")
        clock.now += spent

    monkeypatch.setattr(gpu_session, "setup", setup)
    monkeypatch.setattr(gpu_session, "run_part", run_part)
    monkeypatch.setattr(gpu_session, "run_checks", run_checks)
    out = tmp_path / "out"
    assert gpu_session.main(["--out", str(out), "--scratch", str(tmp_path / "scratch")]) == 0

    # 30 setup + 200 qlora_step + 155 ext_sampler (prepare + step) = 385 s: lora_step (180) no longer fits in 510,
    # ext_adaptive_kl (34) does; gpu_config (168) is skipped by gpu_check's own budget
    assert [c[0] for c in calls] == ["qlora_step", "ext_sampler", "ext_adaptive_kl,gpu_config"]
    assert calls[0][2] == pytest.approx(560 - 30) and calls[2][1][calls[2][1].index("--budget") + 1] == "125"
    session = json.loads((out / "session.json").read_text())
    status = {name: entry["status"] for name, entry in session["parts"].items()}
    assert status == {"setup": "pass", "qlora_step": "pass", "ext_sampler": "pass", "lora_step": "skipped",
                      "ext_adaptive_kl": "pass", "gpu_config": "skipped"}  # fmt: skip
    assert session["left"] == ["lora_step", "gpu_config"] and session["finished"]
    assert session["next"].endswith("--parts lora_step,gpu_config")
    assert session["device"] == {"name": "NVIDIA H100 80GB HBM3"} and session["budget_s"] == 510
    assert session["parts"]["lora_step"]["why"] == "over --budget: 180 s on an H100, 125 s left"
    printed = capsys.readouterr().out
    assert "SKIP  lora_step" in printed and "left for a next call: lora_step, gpu_config" in printed


def test_a_part_past_the_hard_limit_is_stopped_with_its_children(tmp_path):
    log = tmp_path / "slow.log"
    code = "import subprocess, sys, time; print('started', flush=True); " + (
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)"
    )
    start = time.perf_counter()
    rc, seconds = gpu_session.run_logged(["-c", code], log, timeout=3)
    assert rc is None and seconds < 30 and time.perf_counter() - start < 30
    text = log.read_text()
    assert text.startswith("$ python -c ") and "started" in text


@pytest.mark.slow
def test_a_cpu_rehearsal_of_a_part_writes_its_files(tmp_path, capsys):
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    argv = ["--rehearse-on-cpu", "--parts", "ext_adaptive_kl", "--out", str(out), "--scratch", str(scratch)]
    assert gpu_session.main(argv) == 0, capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "logs.tar.gz", "session.json"]
    session = json.loads((out / "session.json").read_text())
    assert session["mode"] == "CPU rehearsal" and session["left"] == [] and session["finished"]
    assert {n: e["status"] for n, e in session["parts"].items()} == {"setup": "pass", "ext_adaptive_kl": "pass"}
    assert session["device"]["name"] == "cpu" and "trl 1.16" in session["versions"]
    checks = json.loads((out / "gpu_check.json").read_text())
    assert checks["steps"]["prepare"]["status"] == "pass" and checks["steps"]["ext_adaptive_kl"]["status"] == "pass"
    with tarfile.open(out / "logs.tar.gz") as tar:
        texts = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}
    assert {"logs/setup.log", "logs/gpu_check_ext_adaptive_kl.log", "logs/gpu_check/ext_adaptive_kl.log"} <= set(texts)
    texts |= {path.name: path.read_text() for path in out.glob("*.json")}
    assert {name: _gpu.absolute_paths(text) for name, text in texts.items() if _gpu.absolute_paths(text)} == {}
