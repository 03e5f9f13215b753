"""Issue 52's own adversarial pass, on surfaces its list did not name: the Hub card of a study's model and the lock
every output folder is held with. Each case goes through the entry point the user runs (scripts/publish.py, the study,
the training script) and failed before its fix:

- a study's run published: its card said every method was "online reinforcement learning ... plain GRPO" with TRL's
  GRPOTrainer, an SFT, RFT or DPO run too (the run's `method_run.json` says which method trained it);
- a base grpo-ext names (`embedded`, `smollm2-135m-instruct`) went into the card's metadata as a Hub model id, and into
  its loading snippet as `from_pretrained("embedded")`: no such Hub model;
- an eval report whose headline numbers its own per-problem records contradict (a pass@k, a maj@k, `n_problems`
  edited) was put on the card as the checkpoint's results;
- `--eval-report` naming a run folder (a study's, with its `test.json`) was a bare `FileNotFoundError` naming no flag;
- a `.grpo_ext.lock` that is a symbolic link: the lock was opened through it, and the file it points at (anywhere on the
  machine) truncated and overwritten with the lock holder's line.
"""

import json
import os
import shutil

import pytest
import yaml

from grpo_ext.errors import UserError
from grpo_ext.evaluation.report import write_reports
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from scripts import publish

PROBLEMS = 6
N = 4


# ---- a study's run, as the method runners leave it -----------------------------------------------------------------


def method_run(folder, method: str):
    """`folder` as a study's run of `method` leaves it: the weights, the tokenizer, the run's record (complete), the
    resolved config and the method runner's record (`method_run.json`)."""
    from grpo_ext.methods import get_method

    shutil.copytree(EMBEDDED_MODEL_DIR, folder)
    online = get_method(method).online
    training = {"learning_rate": 5e-5, "lr_scheduler_type": "constant", "per_device_train_batch_size": 16, "seed": 0}
    training.update(max_steps=2, loss_type="dapo" if online else "sigmoid" if method == "dpo" else "nll")
    if method == "dpo":
        training["beta"] = 0.1
    if online:
        training.update(advantage_mode=get_method(method).advantage_mode, num_generations=4, beta=0.0)
    resolved = {
        "task": {"task": "arithmetic", "task_kwargs": {"max_operands": 4}, "reward_funcs": ["outcome"]},
        "training": training,
        "model": {"model_name_or_path": "embedded", "dtype": "float32"},
    }
    (folder / "grpo_ext_config.yaml").write_text(yaml.safe_dump(resolved, sort_keys=False))
    (folder / "grpo_ext_run.json").write_text(json.dumps({"status": "complete", "global_step": 2}))
    record = {"method": get_method(method).description(), "training": training}
    (folder / "method_run.json").write_text(json.dumps(record))
    return folder


def dry_run(checkpoint, out, *flags):
    return publish.main([str(checkpoint), "--repo-id", "me/study-arm", "--dry-run", "--output-dir", str(out), *flags])


def card(out):
    text = (out / "README.md").read_text()
    header = yaml.safe_load(text.split("---")[1])
    return header, text


@pytest.mark.parametrize("method", ["sft", "rft", "dpo"])
def test_the_card_of_an_offline_methods_run_says_that_method_not_online_grpo(method, tmp_path):
    from grpo_ext.methods import get_method

    run = method_run(tmp_path / "runs" / method / "lr5e-05" / "seed0", method)
    dry_run(run, tmp_path / "up")
    header, text = card(tmp_path / "up")
    described = get_method(method).description()
    for claim in ("online reinforcement learning", "GRPOTrainer", "plain GRPO", "gradient coefficient `outcome`"):
        assert claim not in text, claim
    assert "grpo" not in header["tags"] and method in header["tags"]
    assert described["title"] in text and described["trainer"] in text and described["data_source"] in text
    assert described["gradient_coefficient"] in text
    assert "- rewards: outcome" not in text  # the task's default reward field: no reward trained an SFT run


def test_the_card_of_an_online_methods_run_names_the_method_and_stays_grpo(tmp_path):
    run = method_run(tmp_path / "run", "grpo_outcome")
    dry_run(run, tmp_path / "up")
    header, text = card(tmp_path / "up")
    assert "GRPO (outcome supervision)" in text and "GRPOTrainer" in text and "grpo" in header["tags"]


@pytest.mark.parametrize("damage", ["junk", "list", "link"])
def test_a_method_record_that_is_not_one_is_named(damage, tmp_path):
    run = method_run(tmp_path / "run", "sft")
    record = run / "method_run.json"
    if damage == "junk":
        record.write_text("{not json")
    elif damage == "list":
        record.write_text("[]")
    else:  # a link out of the checkpoint: never read into a public card
        (tmp_path / "secret.json").write_text(json.dumps({"method": {"name": "hf_secret", "online": False}}))
        record.unlink()
        record.symlink_to(tmp_path / "secret.json")
    with pytest.raises(UserError, match=r"CHECKPOINT: .*method_run\.json"):
        dry_run(run, tmp_path / "up")
    assert not (tmp_path / "up").exists()


def test_a_base_grpo_ext_names_is_no_hub_model_on_the_card(tmp_path):
    run = method_run(tmp_path / "run", "grpo_outcome")  # full weights on the embedded base: the study's runs
    dry_run(run, tmp_path / "up")
    header, text = card(tmp_path / "up")
    assert "base_model" not in header  # "embedded" is no Hub model: the Hub would link (or refuse) a wrong one
    assert "grpo-ext embedded base model" in text

    from grpo_ext.hub.card import build_model_card

    for name in ("embedded", "smollm2-135m-instruct"):
        adapter = str(build_model_card(None, "me/x", checkpoint_type="adapter", base_model=name))
        assert f'from_pretrained("{name}")' not in adapter and "huggingface.co/smollm2" not in adapter
        assert f'resolve_model_path("{name}")' in adapter  # how grpo-ext loads it, on any machine
        assert "base_model:" not in adapter.split("---")[1]


def test_the_card_counts_the_steps_the_run_recorded_not_the_planned_ones(tmp_path):
    """A study's refill arm stops when its sample budget is spent (results/compare: 6 of 12 planned steps, complete);
    its folder keeps no trainer_state.json, and the card took `max_steps` for the steps trained."""
    run = method_run(tmp_path / "run", "grpo_outcome")
    (run / "grpo_ext_run.json").write_text(json.dumps({"status": "complete", "global_step": 1}))
    dry_run(run, tmp_path / "up")
    _, text = card(tmp_path / "up")
    assert "- training steps: 1 of 2 planned: the run finished there" in text and "intermediate checkpoint" not in text
    (run / "grpo_ext_run.json").write_text(json.dumps({"status": "complete", "global_step": 2}))
    dry_run(run, tmp_path / "up", "--overwrite")
    assert "- training steps: 2\n" in card(tmp_path / "up")[1]


# ---- the eval report's numbers against its own per-problem records -------------------------------------------------


def report_of(run, tmp_path, **edits):
    """A harness result for `run` (its fingerprint), with per-problem records; `edits` change its headline."""
    from grpo_ext.evaluation.backends import load_fingerprint
    from grpo_ext.evaluation.metrics import pass_at_k

    correct = [0, 1, 2, 4, 0, 3]
    per_problem = [
        {"problem_id": str(i), "n_correct": c, "maj@k": {"1": c / N, "4": float(c > N / 2)}}
        for i, c in enumerate(correct)
    ]
    result = {
        "model": str(run),
        "model_fingerprint": load_fingerprint(str(run)),
        "backend": "transformers",
        "task": "arithmetic",
        "task_id": "arithmetic/test",
        "split": "test",
        "n_problems": PROBLEMS,
        "n": N,
        "ks": [1, 4],
        "params": {"n": N, "temperature": 0.7, "top_p": 1.0, "max_new_tokens": 32, "seed": 0, "batch_size": 16},
        "pass@k": {str(k): sum(pass_at_k(N, c, k) for c in correct) / PROBLEMS for k in (1, 4)},
        "maj@k": {k: sum(p["maj@k"][k] for p in per_problem) / PROBLEMS for k in ("1", "4")},
        "per_problem": per_problem,
        "dropped_ks": [],
        "warnings": [],
        "params_key": "k",
        "mean_accuracy": 10 / 24,
        "answers_extracted": 1.0,
        "samples": {"total": 24, "from_cache": 0, "generated": 24, "seconds": 1.0, "samples_per_second": 24.0},
    }
    for key, value in edits.items():
        table, _, k = key.partition("_at_")
        if k:
            result[f"{table}@k"][k] = value
        else:
            result[key] = value
    folder = tmp_path / "eval"
    shutil.rmtree(folder, ignore_errors=True)
    write_reports([result], folder)
    return folder


def test_a_report_its_records_agree_with_goes_on_the_card(tmp_path):
    run = method_run(tmp_path / "run", "grpo_outcome")
    dry_run(run, tmp_path / "up", "--eval-report", str(report_of(run, tmp_path)))
    header, text = card(tmp_path / "up")
    values = {m["type"]: m["value"] for m in header["model-index"][0]["results"][0]["metrics"]}
    assert values["pass@1"] == pytest.approx(10 / 24) and f"({PROBLEMS} problems)" in text


@pytest.mark.parametrize(
    "edit, message",
    [
        ({"pass_at_1": 0.45}, r"pass@1 = 0\.45, but its per-problem records give 0\.416"),
        ({"maj_at_4": 0.5}, r"maj@4 = 0\.5, but its per-problem records give 0\.333"),
        ({"n_problems": 500}, r"n_problems = 500, but it holds 6 per-problem records"),
    ],
    ids=["pass@1 raised", "maj@4 raised", "n_problems"],
)
def test_a_report_whose_numbers_its_own_records_contradict_is_refused(edit, message, tmp_path):
    run = method_run(tmp_path / "run", "grpo_outcome")
    with pytest.raises(UserError, match=r"--eval-report: .*" + message):
        dry_run(run, tmp_path / "up", "--eval-report", str(report_of(run, tmp_path, **edit)))
    assert not (tmp_path / "up").exists()


def test_eval_report_naming_a_run_folder_names_its_results(tmp_path):
    run = method_run(tmp_path / "run", "grpo_outcome")
    report = report_of(run, tmp_path)
    shutil.copy(report / "report.json", run / "test.json")  # what a study's run folder holds
    with pytest.raises(UserError, match=r"--eval-report: .*run holds no report\.json; .*run/test\.json"):
        dry_run(run, tmp_path / "up", "--eval-report", str(run))


# ---- the lock of an output folder ----------------------------------------------------------------------------------


def linked_lock(folder, victim):
    folder.mkdir(parents=True, exist_ok=True)
    victim.write_text("precious")
    (folder / ".grpo_ext.lock").symlink_to(victim)


def test_a_linked_lock_file_is_never_opened_through_the_link(tmp_path, root, monkeypatch):
    """Through the study (--out) and the training script (output_dir): refused before anything runs, and the file the
    link points at is left as it was."""
    from grpo_ext.experiments.study import stages
    from scripts import run_methods, train

    monkeypatch.chdir(root)
    victim = tmp_path / "victim.txt"
    out = tmp_path / "study"
    linked_lock(out, victim)
    monkeypatch.setattr(stages, "run_study", lambda *a: (_ for _ in ()).throw(AssertionError("the study ran")))
    with pytest.raises(UserError, match=r"--out: .*study/\.grpo_ext\.lock is a symbolic link"):
        run_methods.main(["--study", "configs/compare.yaml", "--out", str(out), "--quick"])
    assert victim.read_text() == "precious" and (out / ".grpo_ext.lock").is_symlink()

    run = tmp_path / "run"
    linked_lock(run, victim)
    monkeypatch.setattr(train, "_train", lambda *a: (_ for _ in ()).throw(AssertionError("training ran")))
    with pytest.raises(UserError, match=r"output_dir: .*run/\.grpo_ext\.lock is a symbolic link"):
        train.main(["--config", "configs/default.yaml", "--output_dir", str(run)])
    assert victim.read_text() == "precious"


def test_a_lock_path_that_is_a_folder_is_one_line(tmp_path):
    from grpo_ext.run_folder import OutputFolderLock

    (tmp_path / "out" / ".grpo_ext.lock").mkdir(parents=True)
    with pytest.raises(UserError, match=r"--out: .*\.grpo_ext\.lock cannot be opened as the folder's lock"):
        OutputFolderLock(tmp_path / "out", field_name="--out").acquire()
    assert os.listdir(tmp_path / "out") == [".grpo_ext.lock"]
