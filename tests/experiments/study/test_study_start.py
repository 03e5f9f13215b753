"""A study's start (grpo_ext.experiments.study.start): one SFT model made once, recorded with its hash, that every arm
trains from on fresh prompts; several search seeds behind a pick; no search run for an arm with nothing to pick."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from grpo_ext.errors import UserError
from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.spec import Setting, pick_settings
from grpo_ext.tasks import get_task

ROOT = Path(__file__).resolve().parents[3]
SFT_STUDY = ROOT / "configs" / "real" / "sft_study.yaml"


def test_sft_study_trains_every_arm_from_its_start_at_one_searched_rate():
    study = load_study(SFT_STUDY)
    assert study.start is not None and study.start.method == "sft" and study.reference_label == "SFT start"
    assert study.search_seeds == (100, 101) and not set(study.search_seeds) & set(study.seeds)
    searched = study.search()
    # grpo_outcome alone searches: 3 rates x 2 search seeds; every other arm trains at its pick (one setting)
    assert sorted((a.name, s.slug, seed) for a, s, seed in searched) == sorted(
        ("grpo_outcome", f"lr{lr:g}", seed) for lr in (1e-4, 3e-4, 1e-3) for seed in (100, 101)
    )
    picks = {"grpo_outcome": Setting((("lr", 3e-4),))}
    assert study.search(picks) == []  # stage 2: the rate_of arms have nothing to pick
    assert {a.name for a in study.arms if a.rate_of} == {a.name for a in study.arms} - {"grpo_outcome"}
    assert [b.name for b in study.baselines if b.raw_base] == ["raw_base"]
    # more SFT: as many gradient samples as every arm (3,200), on reference solutions the start never saw, which the
    # task's train split must hold after the start's (not 8 epochs over the online arms' 400 prompts; 3,200 fresh
    # ones were asked of a split that holds 2,554 after the start's: the run failed at its data)
    arm = study.arm("more_sft")
    config = {**yaml.safe_load((study.configs_dir / "sft.yaml").read_text()), **arm.overrides}
    per_step = config["per_device_train_batch_size"] * config["gradient_accumulation_steps"]
    assert config["max_steps"] * per_step == 3200 and 1 <= 3200 / config["train_size"] <= 1.5
    task = get_task(config["task"], **config["task_kwargs"])
    offset = study.start.overrides["train_size"]
    assert len(task.problems("train", offset + config["train_size"])) == offset + config["train_size"]


def test_a_pick_is_the_mean_over_search_seeds_and_a_single_setting_is_picked_unscored():
    grid = [Setting((("lr", 1e-4),)), Setting((("lr", 3e-4),))]
    # seed 100 alone would pick 3e-4 (0.50 > 0.45); the mean over both seeds picks 1e-4 (0.45 > 0.40)
    by_seed = {"lr0.0001": [0.45, 0.45], "lr0.0003": [0.50, 0.30]}
    scores = {"a": {slug: sum(v) / len(v) for slug, v in by_seed.items()}}
    assert pick_settings(scores, {"a": grid})["a"].slug == "lr0.0001"
    assert pick_settings({}, {"b": grid[1:]})["b"].slug == "lr0.0003"
    with pytest.raises(ValueError, match="no validation score"):
        pick_settings({"a": {"lr0.0001": 0.4}}, {"a": grid})


@pytest.mark.parametrize(
    "change, message",
    [
        ({"method": "grpo_outcome"}, "start.method: method 'grpo_outcome' samples from the model it trains"),
        ({"learning_rate": 0}, r"start.learning_rate: learning_rate: must be in \(0, inf\)"),
        ({"overrides": {"train_offset": 3}}, "start.overrides.train_offset: set by the study"),
        ({"colour": "red"}, r"start: unknown field\(s\) \['colour'\]"),
        ({"label": ""}, "start.label: expected a non-empty name"),
    ],
)
def test_bad_start_names_the_field(tmp_path, change, message):
    import yaml

    data = yaml.safe_load(SFT_STUDY.read_text())
    data["configs"] = str(ROOT / "configs" / "real" / "sft_study")
    data["start"] = {**data["start"], **change}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match=message):
        load_study(path)


def test_raw_base_baseline_needs_a_start(tmp_path):
    import yaml

    data = yaml.safe_load(SFT_STUDY.read_text())
    data["configs"] = str(ROOT / "configs" / "real" / "sft_study")
    del data["start"]
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserError, match="baselines.raw_base.raw_base: only in a study with a `start`"):
        load_study(path)


def test_train_offset_skips_the_first_train_prompts():
    from grpo_ext.script_args import TaskFields
    from grpo_ext.tasks import get_task

    task = get_task("arithmetic", min_operands=2, max_operands=2)
    every = task.load("train", 7)
    fresh = TaskFields(train_size=3, train_offset=4).train_prompts(task)
    assert fresh["prompt"] == every["prompt"][4:7]
    assert TaskFields(train_size=3).train_prompts(task)["prompt"] == every["prompt"][:3]
    with pytest.raises(UserError, match="train_offset: must be in"):
        TaskFields(train_offset=-1)


START_CONFIG = """method: sft
task: arithmetic
task_kwargs: {min_operands: 2, max_operands: 2, digits: 1, operators: "+"}
train_size: 8
model_name_or_path: embedded
use_peft: true
lora_r: 4
lora_alpha: 8
lora_target_modules: all-linear
use_cpu: true
bf16: false
seed: 0
max_steps: 2
learning_rate: 1.0e-2
lr_scheduler_type: constant
gradient_accumulation_steps: 1
logging_steps: 1
save_strategy: "no"
report_to: none
per_device_train_batch_size: 4
max_length: 64
sample_budget: 0
"""


def test_start_is_trained_once_merged_hashed_and_rebuilt_from_its_adapter(tmp_path, monkeypatch):
    """The start trains an adapter, merges it into a model folder and records both hashes; a second build reuses it
    without training; a clone holding only the adapter and the record rebuilds the same weights; a record whose hash
    the rebuilt weights do not match is refused (the arms would start from another model)."""
    import shutil

    import grpo_ext.methods as methods
    from grpo_ext.experiments.study.start import START_RECORD, Start, build_start, start_identity

    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "sft.yaml").write_text(START_CONFIG)
    start = Start("sft", 1e-2, 0, {"train_size": 8})
    model, record = build_start(start, "embedded", configs, tmp_path / "out", [])
    assert (model / "config.json").is_file() and not (model / "adapter_config.json").exists()
    assert record["train_prompts"] == {"offset": 0, "size": 8} and record["trained"]["optimizer_steps"] == 2
    assert start_identity(record) == f"study start sha256:{record['model_sha256']}"
    saved = json.loads((tmp_path / "out" / "start" / START_RECORD).read_text())
    assert saved == record

    def no_training(argv):
        raise AssertionError("a built start is never trained again")

    monkeypatch.setattr(methods, "run_method", no_training)
    assert build_start(start, "embedded", configs, tmp_path / "out", [])[1] == record
    shutil.rmtree(model)  # a clone: the adapter and the record are committed, the merged weights are not
    rebuilt, again = build_start(start, "embedded", configs, tmp_path / "out", [])
    assert again["model_sha256"] == record["model_sha256"] and (rebuilt / "config.json").is_file()

    (tmp_path / "out" / "start" / START_RECORD).write_text(json.dumps({**record, "model_sha256": "0" * 64}))
    with pytest.raises(UserError, match="its runs started from another model"):
        build_start(start, "embedded", configs, tmp_path / "out", [])
    with pytest.raises(UserError, match="made by another command"):
        build_start(Start("sft", 2e-2, 0, {"train_size": 8}), "embedded", configs, tmp_path / "out", [])


def test_arms_skip_the_start_prompts_and_records_name_the_start_by_hash(tmp_path):
    from grpo_ext.experiments.study.options import StudyOptions
    from grpo_ext.experiments.study.provenance import training_record
    from grpo_ext.experiments.study.runs import train_argv

    study = load_study(SFT_STUDY)
    arm = study.arm("grpo_outcome")
    options = StudyOptions(
        base=str(tmp_path / "here" / "start" / "model"),
        configs=str(study.configs_dir),
        base_identity="study start sha256:abc",
        raw_base="smollm2-135m-instruct",
        train_offset=1536,
    )
    argv = train_argv(arm, Setting((("lr", 1e-4),)), 0, tmp_path / "run", options)
    assert argv[argv.index("--train_offset") + 1] == "1536"
    assert argv[argv.index("--model_name_or_path") + 1] == options.base
    record = training_record(argv, study.configs_dir / "grpo_outcome.yaml", options.base_identity)
    # another clone (another folder for the start) records the same command
    moved = train_argv(arm, Setting((("lr", 1e-4),)), 0, tmp_path / "run", StudyOptions(**{
        **vars(options), "base": "/elsewhere/start/model"}))  # fmt: skip
    assert training_record(moved, study.configs_dir / "grpo_outcome.yaml", options.base_identity) == record
    assert "study start sha256:abc" in record["argv"]


def test_report_design_names_the_start_with_the_counts_its_records_give():
    from grpo_ext.experiments.study.report_md import _design

    study = load_study(SFT_STUDY)
    record = {
        "label": "SFT start",
        "command": {"argv": ["--config", "sft.yaml", "--learning_rate", "0.001", "--max_steps", "48"]},
        "train_prompts": {"offset": 0, "size": 1536},
        "trained": {"optimizer_steps": 47, "trained_sequences": 1504, "unique_sequences": 1504},  # not the config's
        "model_sha256": "ab" * 32,
    }
    text = _design(study, None, record)
    assert (
        "Every arm starts from the study's SFT start: sft of the base on the reference solutions of the first "
        "1536 train prompts (1504 gradient samples in 47 optimizer steps at learning rate 0.001)" in text
    )
    assert "weights sha256 `abababababab`" in text and "on the train prompts after those 1536" in text
    assert "trained with each of the seeds 100, 101 (a setting's score is the mean over them" in text
    assert "Every arm starts from it." in _design(load_study(ROOT / "configs" / "compare.yaml"), None, None)


def test_start_only_needs_a_start_and_makes_no_folder(tmp_path):
    from tests.experiments.study.test_study_driver import fresh_driver

    with pytest.raises(UserError, match="--start-only: .* has no `start` section"):
        fresh_driver().main(["--study", str(ROOT / "configs" / "compare.yaml"), "--out", str(tmp_path / "o"),
                             "--start-only"])  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_sft_study_estimate_prices_the_start_and_fits_its_budget():
    from grpo_ext.experiments.study.budget import estimate

    study = load_study(SFT_STUDY)
    result = estimate(study)
    rows = {r["what"]: r for r in result["rows"]}
    assert rows["start (SFT start)"]["runs"] == 1 and rows["start (SFT start)"]["steps"] == 48
    assert rows["grpo_outcome (online)"]["runs"] == 6 + 3  # 3 rates x 2 search seeds, then 3 test seeds
    assert rows["more_sft (sft)"]["runs"] == 3  # one setting: no search run
    # the raw base rambles to the cap: priced at the base's rate, the start at a trained model's
    budget = study.budget["eval_samples_per_second"]
    raw = study.validation.limit * 4 + study.test.limit * 4
    assert rows["raw_base (no training)"]["eval_core_seconds"] == pytest.approx(raw / budget["base"])
    start_evals = study.validation.limit * study.validation.n + study.test.limit * 64
    assert rows["SFT start (no training)"]["eval_core_seconds"] == pytest.approx(start_evals / budget["trained"])
    assert result["core_hours"] <= study.budget["core_hours"]
