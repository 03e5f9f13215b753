"""scripts/search.py: a config's grid trained, scored on validation, the best picked, only the pick scored on test."""

import importlib.util
import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from grpo_ext.errors import UserError

_spec = importlib.util.spec_from_file_location("search_cli_under_test", Path(__file__).parents[2] / "scripts/search.py")
search = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(search)

TINY = "--max_steps 1 --per_device_train_batch_size 8 --num_generations 4 --logging_steps 1"


def test_grid_product_slugs_and_pick_by_validation_then_grid_order():
    grid = search.parse_grid(["learning_rate=1e-4,3e-4", "--beta=0,0.04"])
    settings = search.settings_of(grid)
    assert [search.slug_of(s) for s in settings] == [
        "learning_rate=1e-4,beta=0",
        "learning_rate=1e-4,beta=0.04",
        "learning_rate=3e-4,beta=0",
        "learning_rate=3e-4,beta=0.04",
    ]
    scores = dict(zip(map(search.slug_of, settings), [0.4, 0.5, 0.5, 0.3], strict=True))
    assert search.pick(settings, scores) == {"learning_rate": "1e-4", "beta": "0.04"}  # the tie goes to the earlier


@pytest.mark.parametrize(
    "specs, message",
    [
        (["learning_rate"], "expected FIELD=V1,V2"),
        (["learning_rate="], "expected FIELD=V1,V2"),
        (["lr=1,2", "lr=3"], "field 'lr' given twice"),
        (["lr=1,1"], "repeated value"),
        ([], "at least one"),
        (["output_dir=/a,/b"], "'output_dir=/a' cannot be a folder name"),  # would train outside --out
        (["run_name=a\\b"], "cannot be a folder name"),
    ],
)
def test_bad_grids_name_the_flag(specs, message):
    with pytest.raises(UserError, match=f"--grid.*{message}"):
        search.parse_grid(specs)


def test_train_args_may_not_move_the_runs(root, monkeypatch):
    """Checked on the parsed arguments (issue 52: the dashed spelling got past a check of the underscore one)."""
    monkeypatch.chdir(root)
    assert search.check_train_args("--max_steps 2 --beta=0") == ["--max_steps", "2", "--beta=0"]
    for flags in ("--max_steps 2 --output_dir=/tmp/x", "--output-dir /tmp/x"):
        with pytest.raises(UserError, match="--train-args: sets output_dir to another folder .*the search sets it"):
            search.check_settings("configs/default.yaml", {"x": ["1"]}, search.check_train_args(flags), [])
    with pytest.raises(UserError, match=r"--grid resume_from_checkpoint=a: sets resume_from_checkpoint to 'a'"):
        search.check_settings("configs/default.yaml", {"resume_from_checkpoint": ["a"]}, [], [])


def test_a_grid_field_train_py_does_not_take_is_refused_before_training(python, root, tmp_path):
    cmd = [python, "scripts/search.py", "--config", "configs/default.yaml", "--grid", "learnin_rate=1e-4,nan"]
    proc = subprocess.run([*cmd, "--out", str(tmp_path)], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "--grid learnin_rate=1e-4: " in proc.stderr and "learnin_rate" in proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "search.json").exists()  # nothing trained


def test_a_failing_run_is_reported_with_its_reason(tmp_path):
    script = "import sys; print('error: boom (rerun with --debug for the traceback)'); sys.exit(2)"
    with pytest.raises(UserError, match=r"-c failed \(exit 2\): boom \(whole output: .*train\.log\)"):
        search._run(["-c", script], tmp_path / "train.log")


def test_a_metric_the_harness_does_not_report_is_refused_before_training(root, tmp_path, monkeypatch):
    monkeypatch.chdir(root)
    argv = ["--config", "configs/default.yaml", "--grid", "learning_rate=1e-4", "--out", str(tmp_path)]
    with pytest.raises(UserError, match=r"--metric: expected pass@k or maj@k with k one of \[1, 2, 4, 8, 16\]"):
        search.main([*argv, "--metric", "pass@3"])
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_search_trains_each_setting_once_and_tests_only_the_pick(python, root, tmp_path, monkeypatch, capsys):
    out = tmp_path / "search"
    cmd = [python, "scripts/search.py", "--config", "configs/default.yaml", "--grid", "learning_rate=1e-6,3e-3"]
    cmd += ["--out", str(out), "--train-args", TINY, "--limit", "4", "--n", "2", "--test-n", "2", "--test-limit", "3"]
    cmd += ["--test"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((out / "search.json").read_text())
    for slug, score in record["scores"].items():
        report = json.loads((out / "runs" / slug / "validation" / "report.json").read_text())
        assert report["models"][0]["split"] == "validation" and report["models"][0]["pass@k"]["1"] == score
        assert report["models"][0]["n_problems"] == 4
    best = max(record["scores"], key=lambda s: (record["scores"][s], -list(record["scores"]).index(s)))
    assert record["pick"]["slug"] == best
    test = json.loads((out / "test" / "report.json").read_text())
    assert [(m["split"], m["n_problems"]) for m in test["models"]] == [("test", 3), ("test", 3)]  # --test-limit
    assert test["models"][1]["model"] == str(out / "runs" / best / "model")  # the pick, and nothing else, on test
    assert record["test"]["pick"] == test["models"][1]["pass@k"]["1"]
    assert not any((out / "runs" / slug / "test").exists() for slug in record["scores"])
    weights = {slug: (out / "runs" / slug / "model" / "model.safetensors").stat().st_mtime for slug in record["scores"]}
    monkeypatch.chdir(root)  # the rest runs in this process: nothing is left to train or sample
    search.main(cmd[2:])
    assert "training" not in capsys.readouterr().out  # resumed: nothing trained again
    assert {s: (out / "runs" / s / "model" / "model.safetensors").stat().st_mtime for s in weights} == weights
    assert json.loads((out / "search.json").read_text())["scores"] == record["scores"]
    at = cmd.index("--train-args")
    for argv, refused in [
        ([*cmd[2:], "--limit", "3"], "validation/report.json: made by"),  # a report of other settings is not reused
        ([*cmd[2:at], *cmd[at + 2 :], "--train-args", TINY + " --seed 1"], "model: trained by"),  # nor such a model
    ]:
        with pytest.raises(UserError, match=f"{refused}.*use another --out"):
            search.main(argv)


def test_a_report_of_other_weights_or_another_load_is_scored_again(tmp_path, monkeypatch):
    """A finished validation report is reused only for the models the harness would load now: its recorded
    fingerprints must be theirs (a model retrained in place, or a QLoRA adapter now loaded onto its 4-bit base)."""
    from types import SimpleNamespace

    from grpo_ext.evaluation.backends import load_fingerprint

    out, calls = tmp_path / "validation", []
    args = SimpleNamespace(task="arithmetic", task_kwargs="{}", limit=4, n=2, temperature=1.0)
    out.mkdir()

    def harness(argv, log):  # what the harness would write: a complete report of this command and these models
        calls.append(argv)
        models = [{"model_fingerprint": load_fingerprint("embedded")}]
        command = "python " + shlex.join(argv)
        (out / "report.json").write_text(json.dumps({"complete": True, "command": command, "models": models}))

    monkeypatch.setattr(search, "_run", harness)
    search._evaluate(["embedded"], "validation", args, out)
    search._evaluate(["embedded"], "validation", args, out)
    assert len(calls) == 1  # the second call read the report
    report = json.loads((out / "report.json").read_text())
    report["models"][0]["model_fingerprint"] = "0123456789abcdef"  # made from other weights
    (out / "report.json").write_text(json.dumps(report))
    search._evaluate(["embedded"], "validation", args, out)
    assert len(calls) == 2


def test_an_unfinished_run_of_another_command_starts_again_and_one_of_this_command_resumes(tmp_path, monkeypatch):
    from grpo_ext.checkpoints import write_run_status

    calls = []
    monkeypatch.setattr(search, "_run", lambda argv, log: calls.append(argv))
    folder, train = tmp_path / "run", ["scripts/train.py", "--seed", "0"]
    (folder / "model" / "checkpoint-3").mkdir(parents=True)
    write_run_status(folder / "model", "running", max_steps=8)
    (folder / search.RUN_RECORD).write_text(json.dumps({"train": ["scripts/train.py", "--seed", "1"]}))
    search._train(train, folder, save_steps=3)
    assert "--resume_from_checkpoint" not in calls[0] and calls[0][-2:] == ["--overwrite_output_dir", "true"]
    assert calls[0][3:9] == ["--save_strategy", "steps", "--save_steps", "3", "--save_total_limit", "2"]
    write_run_status(folder / "model", "failed", error="stopped", step=3)
    search._train(train, folder, save_steps=3)  # the record now names this command: its checkpoint is continued
    assert calls[1][-2:] == ["--resume_from_checkpoint", str(folder / "model" / "checkpoint-3")]


def test_a_search_stopped_mid_run_resumes_from_its_checkpoint_not_from_step_0(root, tmp_path, monkeypatch, capsys):
    from grpo_ext.checkpoints import write_run_status

    monkeypatch.chdir(root)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    folder = tmp_path / "runs" / "learning_rate=1e-3"
    model = folder / "model"
    train = ["scripts/train.py", "--config", "configs/default.yaml", "--output_dir", str(model)]
    train += [*TINY.replace("--max_steps 1", "--max_steps 2").split(), "--max_completion_length", "16"]
    search._train(train, folder, save_steps=1)  # the run as a search makes it: checkpoints 1 and 2, then complete
    state = json.loads((model / "checkpoint-1" / "trainer_state.json").read_text())
    state["log_history"][0]["from_checkpoint_1"] = True  # only a run resumed from checkpoint-1 carries it on
    (model / "checkpoint-1" / "trainer_state.json").write_text(json.dumps(state))
    # Killed outright after step 1: no later checkpoint, no final model, the status still `running`.
    shutil.rmtree(model / "checkpoint-2")
    for name in ("model.safetensors", "trainer_state.json"):
        (model / name).unlink()
    write_run_status(model, "running", max_steps=2)
    capsys.readouterr()
    search._train(train, folder, save_steps=1)
    assert "resumed from checkpoint-1" in capsys.readouterr().out
    final = json.loads((model / "trainer_state.json").read_text())
    assert final["global_step"] == 2 and final["log_history"][0].get("from_checkpoint_1") is True
    assert json.loads((model / "grpo_ext_run.json").read_text())["status"] == "complete"
    assert (model / "model.safetensors").is_file() and (model / "checkpoint-2").is_dir()


def test_search_seed_trains_the_grid_at_it_and_tests_the_pick_trained_again_at_the_configs_seed(
    root, tmp_path, monkeypatch
):
    trained, evaluated = [], []
    monkeypatch.setattr(search, "_train", lambda train, folder, save_steps: trained.append((folder, train)))

    def evaluate(models, split, args, out):
        evaluated.append((split, models))
        return {"models": models}

    monkeypatch.setattr(search, "_evaluate", evaluate)
    monkeypatch.setattr(search, "_fingerprints", lambda models: list(models))  # nothing is trained here
    # validation and test scores from the model's path: 3e-4 is the best setting
    monkeypatch.setattr(
        search, "_score", lambda report, metric, model=0: 0.5 if "3e-4" in report["models"][model] else 0
    )
    monkeypatch.chdir(root)
    out = tmp_path / "s"
    argv = ["--config", "configs/default.yaml", "--grid", "learning_rate=1e-4,3e-4", "--out", str(out), "--test"]
    record = search.main([*argv, "--search-seed", "100"])

    grid_runs, (test_folder, test_train) = trained[:2], trained[2]
    assert [folder.name for folder, _ in grid_runs] == ["learning_rate=1e-4", "learning_rate=3e-4"]
    assert all(train[train.index("--seed") + 1] == "100" for _, train in grid_runs)
    assert test_folder == out / "test_run" and "--seed" not in test_train  # the config's own seed
    assert test_train[test_train.index("--learning_rate") + 1] == "3e-4"  # the pick's settings
    assert evaluated[-1] == ("test", ["embedded", str(out / "test_run" / "model")])
    assert record["search_seed"] == 100 and record["test"]["model"] == str(out / "test_run" / "model")

    trained.clear()
    with pytest.raises(UserError, match="would look at test twice: pass --test-again"):
        search.main(argv)  # without it, the pick's own search run is the tested one: a second look at test
    record = search.main([*argv, "--test-again"])  # on purpose: recorded
    assert len(trained) == 4 and evaluated[-1][1][1] == str(out / "runs" / "learning_rate=3e-4" / "model")
    assert [look["model"] for look in record["test_looks"]] == [
        str(out / "test_run" / "model"),
        str(out / "runs" / "learning_rate=3e-4" / "model"),
    ]
    assert "Test was looked at 2 times" in (out / "search.md").read_text()

    for extra, message in [
        (["--search-seed", "0"], "--search-seed 0: it is the config's seed"),  # configs/default.yaml: seed 0
        (["--search-seed", "100", "--train-args", "--seed 7"], "--train-args: sets seed to 7 .*--search-seed sets"),
        (["--search-seed", "100", "--grid", "seed=1,2"], "--grid .*seed=1: sets seed to 1 .*--search-seed sets"),
    ]:
        with pytest.raises(UserError, match=message):
            search.main([*argv, *extra])
