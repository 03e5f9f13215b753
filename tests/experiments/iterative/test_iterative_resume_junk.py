"""The iterative loop resumes only from its own state, read whole (issue 52, the last adversarial pass). Each case goes
through `scripts/iterative.py` (the quick config, one seed, one process) on a saved state as the loop writes it, and
failed before its fix:

- an `iterative_state.json` or `start_state.json` that is JSON but not a state (`[]`, `3`, fields missing) was a
  traceback, not one line naming the file;
- a replay record that is not one failed only after the iteration had trained its policy;
- an `iter_<k>` that is a symbolic link was an OSError naming nothing (rmtree refuses a link);
- a moved output folder failed on resume: the state named its folders by absolute paths;
- a run saved in another clone was refused (the base recorded as that clone's folder), and the hint said
  `--resume false`, which deletes the finished iterations;
- a `report_dir` inside an arm's own report folder was accepted, and the combined report overwrote the arm's.

Nothing trains: the policy's trainer (and iteration 0) are replaced by a stop that says what they were given."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from grpo_ext.errors import UserError
from grpo_ext.experiments.iterative.state import LOOP_STATE_VERSION, save_state
from scripts import iterative as iterative_script

ROOT = Path(__file__).resolve().parents[3]
ELSEWHERE_EMBEDDED = "/elsewhere/grpo-ext/grpo_ext/assets/embedded"  # the embedded base as another clone resolved it


def argv(run: Path, arm: str = "verifier", *more: str) -> list[str]:
    config = str(ROOT / "configs" / "iterative_quick.yaml")
    return ["--config", config, "--output_dir", str(run), "--seeds", "0", "--arms", arm, "--workers", "1", *more]


def config_of(run: Path, arm: str = "verifier") -> dict:
    """The settings a run of `argv(run, arm)` saves (and a resume must match)."""
    from grpo_ext.experiments.iterative import Experiment

    return Experiment(*iterative_script.parse_args(argv(run, arm))).config(0)


class Trains(Exception):
    """An iteration reached its training (the policy it was given in `args`)."""


@pytest.fixture
def no_training(monkeypatch):
    def build_policy_trainer(policy, *args, **kwargs):
        raise Trains(policy)

    monkeypatch.setattr("grpo_ext.experiments.iterative.loop.build_policy_trainer", build_policy_trainer)


def saved_start(run: Path, config: dict) -> Path:
    """Seed 0's iteration 0 as the loop saves it (its RM folder and replay records), in `run`."""
    folder = run / "seed_0" / "start"
    (folder / "reward_model").mkdir(parents=True)
    record = {"id": "it0/0", "prompt": "1+2=", "completion": "3", "label": 1, "steps": [1]}
    (folder / "rm_data.jsonl").write_text(json.dumps(record) + "\n")
    state = {
        "version": LOOP_STATE_VERSION,
        "config": config,
        "iteration": 0,
        "reward_model": str(folder / "reward_model"),
    }
    state |= {"buffer": ["start/rm_data.jsonl"], "row": {"iteration": 0, "policy": "embedded", "pass@1": 0.25}}
    save_state(folder, state, "start_state.json")
    return folder


def saved_arm(run: Path, config: dict, arm: str = "verifier") -> dict:
    """`arm`'s state after its iteration 1 (its policy folder there), as the loop saves it, in `run`."""
    folder = run / "seed_0" / arm
    policy = folder / "iter_1" / "policy"
    policy.mkdir(parents=True)
    state = {"version": LOOP_STATE_VERSION, "config": {**config, "arm": arm}, "iteration": 1, "arm": arm, "seed": 0}
    state |= {"policy": str(policy), "reference": str(policy), "reward_model": None, "buffer": ["start/rm_data.jsonl"]}
    state["history"] = [{"iteration": 0, "arm": arm, "seed": 0}, {"iteration": 1, "arm": arm, "seed": 0}]
    save_state(folder, state)
    return state


# ---- a state that is not one: one line naming the file ------------------------------------------------------------


@pytest.mark.parametrize("text", ["[]", "3", json.dumps({"version": LOOP_STATE_VERSION})])
@pytest.mark.parametrize("name", ["start_state.json", "iterative_state.json"])
def test_a_junk_state_is_one_line_naming_it(name, text, tmp_path, no_training):
    run = tmp_path / "run"
    folder = saved_start(run, config_of(run)) if name == "iterative_state.json" else run / "seed_0" / "start"
    path = (run / "seed_0" / "verifier" if name == "iterative_state.json" else folder) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(UserError, match=f"{path}"):
        iterative_script.main(argv(run))


def test_a_junk_replay_record_fails_before_the_iteration_trains(tmp_path, no_training):
    run = tmp_path / "run"
    start = saved_start(run, config_of(run, "iterative"))
    with (start / "rm_data.jsonl").open("a") as handle:
        handle.write('{"id": "it0/1", "label": \n')  # torn: the second record
    with pytest.raises(UserError, match=rf"{start / 'rm_data.jsonl'} line 2: not a JSON record"):
        iterative_script.main(argv(run, "iterative"))


# ---- an iteration's folder that is a link ---------------------------------------------------------------------------


def test_an_iteration_folder_that_is_a_link_is_refused_and_its_target_kept(tmp_path, no_training):
    run = tmp_path / "run"
    saved_start(run, config_of(run))
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "notes.txt").write_text("a user's")
    (run / "seed_0" / "verifier").mkdir()
    (run / "seed_0" / "verifier" / "iter_1").symlink_to(target)
    with pytest.raises(UserError, match=r"seed_0/verifier/iter_1 is a symbolic link .*never followed"):
        iterative_script.main(argv(run))
    assert (target / "notes.txt").read_text() == "a user's"


# ---- a moved output folder, another clone --------------------------------------------------------------------------


@pytest.mark.parametrize("written", ["now", "before paths were relative"])
def test_a_moved_output_folder_resumes_from_its_own_folders(written, tmp_path, no_training):
    run, moved = tmp_path / "a" / "run", tmp_path / "b" / "run"
    config = config_of(run)
    start = saved_start(run, config)
    state = saved_arm(run, config)
    if written != "now":  # as the loop wrote its states before: absolute paths
        path = run / "seed_0" / "verifier" / "iterative_state.json"
        path.write_text(json.dumps(state))
        start_state = json.loads((start / "start_state.json").read_text())
        start_state["reward_model"] = str(start / "reward_model")
        (start / "start_state.json").write_text(json.dumps(start_state))
    shutil.move(tmp_path / "a", tmp_path / "b")
    with pytest.raises(Trains) as trained:
        iterative_script.main(argv(moved))
    assert trained.value.args[0] == str(moved / "seed_0" / "verifier" / "iter_1" / "policy")  # iteration 2's start
    on_disk = json.loads((moved / "seed_0" / "verifier" / "iterative_state.json").read_text())
    if written == "now":
        assert on_disk["policy"] == on_disk["reference"] == "verifier/iter_1/policy"  # relative to the seed folder


def test_a_state_naming_a_folder_outside_its_seed_folder_is_refused(tmp_path, no_training):
    run = tmp_path / "run"
    config = config_of(run)
    saved_start(run, config)
    state = saved_arm(run, config)
    outside = tmp_path / "someone_elses" / "policy"
    outside.mkdir(parents=True)
    path = run / "seed_0" / "verifier" / "iterative_state.json"
    path.write_text(json.dumps({**state, "policy": str(outside)}))
    with pytest.raises(UserError, match=rf"{path}: policy .* is not a folder of the seed folder"):
        iterative_script.main(argv(run))


def test_a_run_saved_in_another_clone_resumes_and_another_base_is_refused_without_deleting(tmp_path, no_training):
    run = tmp_path / "run"
    config = config_of(run)
    assert config["base"] == "embedded"  # as every clone names it
    saved_start(run, {**config, "base": ELSEWHERE_EMBEDDED})  # as another clone recorded it
    state = saved_arm(run, {**config, "base": ELSEWHERE_EMBEDDED})
    with pytest.raises(Trains):
        iterative_script.main(argv(run))
    saved_arm(tmp_path / "other", {**config, "base": "/elsewhere/another_base"})
    shutil.copyfile(
        tmp_path / "other" / "seed_0" / "verifier" / "iterative_state.json",
        run / "seed_0" / "verifier" / "iterative_state.json",
    )
    with pytest.raises(UserError, match=r"holds a run with other settings \(base\)") as refused:
        iterative_script.main(argv(run))
    assert "--resume false" not in str(refused.value)  # it deletes the finished iterations
    assert Path(state["policy"]).is_dir()


# ---- the experiment's report folder ---------------------------------------------------------------------------------


@pytest.mark.parametrize("inside", ["seed_0/verifier/report", "seed_0/verifier/iter_1", "seed_0"])
def test_a_report_dir_inside_a_seed_folder_is_refused_before_any_job(inside, tmp_path, monkeypatch):
    def run_start(*args, **kwargs):
        raise AssertionError("no job starts")

    monkeypatch.setattr("grpo_ext.experiments.iterative.iteration_zero.run_start", run_start)
    run = tmp_path / "run"
    with pytest.raises(UserError, match=r"report_dir: .* lies inside .*seed_0, where the runs keep their state"):
        iterative_script.main(argv(run, "verifier", "--report_dir", str(run / inside)))
