"""A study run cut by a stop resumes from its newest checkpoint (grpo_ext.experiments.study.resume) to the run it would
have been uninterrupted: the same adapter weights (bit for bit), learning curve, log history and counts; only a
checkpoint of this study's command, whole, is ever resumed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import grpo_ext.experiments.study.runs as runs
from grpo_ext.errors import UserError
from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.experiments.study.provenance import RUN_RECORD, record_training, training_record
from grpo_ext.experiments.study.spec import Arm

ROOT = Path(__file__).resolve().parents[3]
STUDY = load_study(ROOT / "configs" / "compare.yaml")

# The study's --quick machinery with a budget of a few steps on the embedded base, a LoRA policy as the real study
# trains (and its sampler and shared prompt forward for the online arms), a curve point at every step.
COMMON = (
    "--train_size 16 --warmup_steps 0 --logging_steps 1 --curve_every 1 --curve_prompts 4 --curve_n 2 "
    "--gradient_accumulation_steps 1 --use_peft true --lora_r 4 --lora_alpha 8 --learning_rate 1e-3"
)
BY_RUNNER = {
    "online": "--per_device_train_batch_size 8 --num_generations 4 --max_completion_length 16 "
    "--sample_max_new_tokens 16 --generation_backend sampler --share_prompt_forward true",
    "sft": "--per_device_train_batch_size 4 --sample_budget 0",
    "rft": "",
    "dpo": "",
}
ARMS = {  # 4 steps (a budget of 32 samples); the refill arm draws up to 16 a step: its budget, not max_steps, ends it
    "grpo_outcome": Arm("grpo_outcome", "grpo_outcome", {"max_steps": 4, "sample_budget": 32}),
    "outcome_refill": Arm(
        "outcome_refill",
        "grpo_outcome",
        {"max_steps": 6, "sample_budget": 48, "zero_std_groups": "refill", "max_refill_rounds": 1},
    ),
    "sft": Arm("sft", "sft", {"max_steps": 4}),
}
TIMINGS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


def options() -> StudyOptions:
    return StudyOptions(
        base="embedded",
        configs=str(STUDY.configs_dir),
        quick=True,
        progress=False,
        quick_flags=COMMON,
        quick_method_flags=BY_RUNNER,
    )


def study_of(arm: Arm, checkpoint_steps: int):
    return replace(STUDY, arms=[arm], checkpoint_steps=checkpoint_steps)


def job_of(arm: Arm) -> runs.Job:
    return runs.Job(arm, arm.settings(STUDY.learning_rates)[0], 100, STUDY.validation)


def train(out: Path, arm: Arm, checkpoint_steps: int = 2) -> Path:
    study, job = study_of(arm, checkpoint_steps), job_of(arm)
    folder = runs.job_dir(job, out, study)
    runs._train(job, folder, study, options())
    return folder


class Stopped(Exception):
    """The stop of a session, one step after the checkpoint at step 2."""


def _records(folder: Path) -> dict:
    return {name: json.loads((folder / name).read_text()) for name in ("learning_curve.json", "training_log.json")}


def _without_timings(log: list[dict]) -> list[dict]:
    """A log history less its wall times (which no two runs share), and the last sitting's train_loss (transformers
    averages it over the steps of that `train()` call)."""
    return [{k: v for k, v in entry.items() if k not in TIMINGS | {"train_loss"}} for entry in log]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ARMS))
def test_a_run_stopped_after_a_checkpoint_resumes_to_the_uninterrupted_run(name, tmp_path, monkeypatch, capsys):
    import torch
    from safetensors.torch import load_file

    from grpo_ext.methods.sittings import RunProgress

    arm = ARMS[name]
    straight = train(tmp_path / "straight", arm)
    unsaved = train(tmp_path / "unsaved", arm, checkpoint_steps=0)  # the same run, no checkpoint: the same model
    assert not list(straight.glob("checkpoint-*"))  # a finished run keeps none

    def stop(self, args, state, control, **kwargs):
        if state.global_step == 3:
            raise Stopped

    monkeypatch.setattr(RunProgress, "on_step_end", stop, raising=False)
    with pytest.raises(Stopped):
        train(tmp_path / "cut", arm)
    monkeypatch.undo()
    cut = runs.job_dir(job_of(arm), tmp_path / "cut", study_of(arm, 2))
    assert [p.name for p in cut.glob("checkpoint-*")] == ["checkpoint-2"]
    assert not (cut / "training_cost.json").exists()
    capsys.readouterr()
    assert train(tmp_path / "cut", arm) == cut  # the study's next sitting
    assert f"resuming {name}/lr5e-05/seed100 (validation) from step 2" in capsys.readouterr().out
    assert not list(cut.glob("checkpoint-*"))

    weights = [load_file(folder / "adapter_model.safetensors") for folder in (straight, unsaved, cut)]
    assert weights[0].keys() == weights[2].keys()
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key
        assert torch.equal(weights[0][key], weights[2][key]), key
    assert any(weights[0][key].abs().max() > 0 for key in weights[0] if "lora_B" in key)  # it learned something

    records = [_records(folder) for folder in (straight, unsaved, cut)]
    assert records[0]["learning_curve.json"] == records[2]["learning_curve.json"] == records[1]["learning_curve.json"]
    logs = [_without_timings(r["training_log.json"]) for r in records]
    assert logs[0] == logs[1] == logs[2]
    steps = [entry["step"] for entry in records[2]["training_log.json"] if "loss" in entry]
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] >= 3  # the whole run's history, from step 1
    status = json.loads((cut / "grpo_ext_run.json").read_text())
    assert status["status"] == "complete" and _without_timings(status["log_history"])[:2] == logs[2][:2]

    costs = [json.loads((folder / "training_cost.json").read_text()) for folder in (straight, cut)]
    seconds = ("train_seconds", "curve_seconds", "wall_seconds", "sampling_seconds", "sittings", "resumed_from_steps")
    assert {k: v for k, v in costs[0].items() if k not in seconds} == {
        k: v for k, v in costs[1].items() if k not in seconds
    }
    assert (costs[0]["sittings"], costs[0]["resumed_from_steps"]) == (1, [])
    assert (costs[1]["sittings"], costs[1]["resumed_from_steps"]) == (2, [2])
    assert costs[1]["train_seconds"] > 0 and costs[1]["curve_seconds"] > 0
    if name == "outcome_refill":  # refills drew (the draw count is in the checkpoint) and the budget ended the run
        assert costs[1]["samples_generated"] > 8 * costs[1]["optimizer_steps"] and costs[1]["optimizer_steps"] < 6


# ---- which checkpoint a study resumes (the runs faked) --------------------------------------------------------------

ONLINE = Arm("grpo_outcome", "grpo_outcome")


@pytest.fixture
def trained(monkeypatch):
    """`run_method` faked: it records the command and what the folder held when it started, and leaves a finished
    run."""
    calls = []

    def run_method(argv):
        folder = Path(argv[argv.index("--output_dir") + 1])
        calls.append({"argv": argv, "held": sorted(p.name for p in folder.iterdir())})
        (folder / "training_cost.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"")

    monkeypatch.setattr("grpo_ext.methods.run_method", run_method)
    return calls


def whole_checkpoint(folder: Path, step: int, stopped: bool = False) -> Path:
    """A checkpoint as the online runner saves it (the files a resume reads, tiny)."""
    import torch
    from safetensors.torch import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    save_file({"lora_B": torch.zeros(2, 2)}, str(path / "adapter_model.safetensors"))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.save({}, path / name)
    (path / "grpo_ext_state.json").write_text("{}")
    callbacks = {"RunProgress": {"args": {}, "attributes": {}, "parts": {}}}
    callbacks["TrainerControl"] = {"args": {"should_training_stop": stopped}, "attributes": {}}
    state = {"global_step": step, "log_history": [], "stateful_callbacks": callbacks}
    (path / "trainer_state.json").write_text(json.dumps(state))
    return path


def _record(folder: Path) -> dict:
    job = job_of(ONLINE)
    argv = runs.train_argv(job.arm, job.setting, job.seed, folder, options())
    return training_record(argv, runs.method_config_path(ONLINE.method, options().configs))


def _resumed_from(call: dict) -> str | None:
    argv = call["argv"]
    return argv[argv.index("--resume_from_checkpoint") + 1] if "--resume_from_checkpoint" in argv else None


def test_checkpoint_flags_are_the_studys_and_no_part_of_the_runs_record(tmp_path, trained):
    """Every run saves a checkpoint every `checkpoint_steps` steps, the newest only; the flags stay out of its
    record, so a run finished before checkpoints existed is still this study's command."""
    folder = train(tmp_path, ONLINE, checkpoint_steps=10)
    argv = trained[0]["argv"]
    assert argv[-6:] == ["--save_strategy", "steps", "--save_steps", "10", "--save_total_limit", "1"]
    assert json.loads((folder / RUN_RECORD).read_text()) == _record(folder)
    assert _resumed_from(trained[0]) is None
    train(tmp_path / "off", ONLINE, checkpoint_steps=0)
    assert "--save_strategy" not in trained[1]["argv"]
    assert load_study(ROOT / "configs" / "real" / "sft_study.yaml").checkpoint_steps == 10


@pytest.mark.parametrize("value", [-1, 2.5, "often", True])
def test_a_bad_checkpoint_steps_names_the_field(tmp_path, value):
    import yaml

    data = yaml.safe_load((ROOT / "configs" / "compare.yaml").read_text())
    data["configs"] = str(ROOT / "configs" / "methods")
    data["checkpoint_steps"] = value
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="checkpoint_steps"):
        load_study(path)


def test_the_newest_whole_checkpoint_of_the_same_command_is_resumed(tmp_path, trained, capsys):
    folder = runs.job_dir(job_of(ONLINE), tmp_path, study_of(ONLINE, 2))
    record_training(folder, _record(folder))  # what the cut sitting wrote before it trained
    whole_checkpoint(folder, 2)
    newest = whole_checkpoint(folder, 4)
    train(tmp_path, ONLINE)
    assert _resumed_from(trained[0]) == str(newest)
    assert "--save_steps" in trained[0]["argv"]  # and it goes on saving
    assert "grpo_outcome/lr5e-05/seed100 (validation) from step 4" in capsys.readouterr().out
    assert not list(folder.glob("checkpoint-*"))  # the finished run's checkpoints are removed


@pytest.mark.parametrize("other", ["--learning_rate", "--seed"])
def test_a_checkpoint_of_another_command_is_not_resumed(tmp_path, trained, capsys, other):
    """The folder's record is another command's (another rate or seed): its checkpoints are removed before the run
    trains again from step 0 (a later sitting must not take them for this command's)."""
    folder = runs.job_dir(job_of(ONLINE), tmp_path, study_of(ONLINE, 2))
    record = _record(folder)
    argv = list(record["argv"])
    argv[argv.index(other) + 1] = "0.5" if other == "--learning_rate" else "7"
    record_training(folder, {**record, "argv": argv})
    whole_checkpoint(folder, 4)
    train(tmp_path, ONLINE)
    assert _resumed_from(trained[0]) is None
    assert "checkpoint-4" not in trained[0]["held"]
    assert f"not resuming {folder}: its checkpoints were saved by another command" in capsys.readouterr().out
    assert json.loads((folder / RUN_RECORD).read_text()) == record  # now this command's


def test_a_folder_without_a_record_is_not_resumed(tmp_path, trained, capsys):
    folder = runs.job_dir(job_of(ONLINE), tmp_path, study_of(ONLINE, 2))
    whole_checkpoint(folder, 4)
    train(tmp_path, ONLINE)
    assert _resumed_from(trained[0]) is None and "checkpoint-4" not in trained[0]["held"]
    assert f"not resuming {folder}: no {RUN_RECORD}" in capsys.readouterr().out


def test_a_corrupt_checkpoint_is_skipped_for_the_one_before_it(tmp_path, trained, capsys):
    """A save killed half-way (no trainer_state.json), a torn optimizer state, a state of another step, the run's last
    checkpoint (saved once it had stopped training) and a staging folder are passed over, each named; the newest whole
    one is resumed. With none whole, the run trains from step 0 and the debris is removed first."""
    folder = runs.job_dir(job_of(ONLINE), tmp_path, study_of(ONLINE, 2))
    record_training(folder, _record(folder))
    good = whole_checkpoint(folder, 2)
    (whole_checkpoint(folder, 4) / "trainer_state.json").unlink()
    (whole_checkpoint(folder, 6) / "optimizer.pt").write_bytes(b"torn")
    moved = whole_checkpoint(folder, 8)
    (moved / "trainer_state.json").write_text(json.dumps({**json.loads((moved / "trainer_state.json").read_text()),
                                                         "global_step": 7}))  # fmt: skip
    whole_checkpoint(folder, 10, stopped=True)
    (folder / ".checkpoint-12.partial" / "checkpoint-12").mkdir(parents=True)
    train(tmp_path, ONLINE)
    assert _resumed_from(trained[0]) == str(good)
    out = capsys.readouterr().out
    assert f"ignoring {folder / 'checkpoint-10'}: the run had stopped training there" in out
    assert f"ignoring {folder / 'checkpoint-8'}: its trainer_state.json is at step 7, not 8" in out
    assert f"ignoring {folder / 'checkpoint-6'}: " in out and "optimizer.pt is torn" in out
    assert f"ignoring {folder / 'checkpoint-4'}: no trainer_state.json" in out
    assert [name for name in trained[0]["held"] if "checkpoint" in name] == ["checkpoint-2"]  # the rest removed

    (folder / "training_cost.json").unlink()  # the same folder, cut again, every checkpoint now broken
    (whole_checkpoint(folder, 2) / "rng_state.pth").unlink()
    (folder / ".checkpoint-4.partial" / "checkpoint-4").mkdir(parents=True)
    train(tmp_path, ONLINE)
    assert _resumed_from(trained[1]) is None
    assert not [name for name in trained[1]["held"] if "checkpoint" in name]


def test_the_runner_checks_a_checkpoint_before_anything_loads(tmp_path):
    """`python -m grpo_ext.methods ... --resume_from_checkpoint`: a checkpoint that is not whole is one line before any
    model loads; transformers' own restore of callback states would replace the runner's callbacks: refused."""
    from grpo_ext.methods import run_method

    config = str(ROOT / "configs" / "methods" / "grpo_outcome.yaml")
    checkpoint = whole_checkpoint(tmp_path, 2)
    argv = ["--config", config, "--output_dir", str(tmp_path), "--resume_from_checkpoint", str(checkpoint)]
    with pytest.raises(UserError, match="restore_callback_states_from_checkpoint"):
        run_method([*argv, "--restore_callback_states_from_checkpoint", "true"])
    (checkpoint / "trainer_state.json").unlink()
    with pytest.raises(UserError, match="no trainer_state.json"):
        run_method(argv)
