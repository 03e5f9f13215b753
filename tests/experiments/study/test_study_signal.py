"""A study's stage 0 (issue 28): the `signal` section of the study YAML, the stage's resume (signal.json reused
only while its settings hold), and the report's section with the arms' row marked."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import yaml

from grpo_ext.errors import UserError
from grpo_ext.experiments.study.config import Signal, load_study
from grpo_ext.experiments.study.method_configs import arm_values
from grpo_ext.experiments.study.options import StudyOptions
from grpo_ext.experiments.study.signal import measure as signal_measure
from grpo_ext.experiments.study.signal import stage_zero
from grpo_ext.experiments.study.signal.report_section import SIGNAL_FILE, TITLE, read_signal, render_signal

ROOT = Path(__file__).resolve().parents[3]
STUDY = ROOT / "configs" / "compare.yaml"


def _arm_batch() -> tuple[int, int]:
    """grpo_outcome's samples a step and group size, as configs/methods/grpo_outcome.yaml has them today."""
    study = load_study(STUDY)
    values = arm_values(study.arm("grpo_outcome"), study.configs_dir)
    return values["samples"], values["num_generations"]


def _study_with(tmp_path, signal, **arms) -> Path:
    """The shipped study with its `signal` section replaced (deleted: None) and arms added or replaced."""
    data = yaml.safe_load(STUDY.read_text())
    data.pop("signal", None)
    if signal is not None:
        data["signal"] = signal
    data["arms"].update(arms)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_shipped_study_measures_the_signal_at_the_arms_batch_size():
    study = load_study(STUDY)
    batch, group = _arm_batch()
    assert study.signal.arm == "grpo_outcome" and batch in study.signal.samples  # the row the arms train at
    assert len(study.signal.samples) >= 3 and all(n % group == 0 for n in study.signal.samples)
    assert study.signal.minibatches >= 3 and study.signal.objectives == ("grpo", "sft")


def test_a_section_with_defaults_and_a_study_without_one(tmp_path):
    batch, _ = _arm_batch()
    study = load_study(_study_with(tmp_path, {"samples": [batch], "minibatches": 3}))
    assert study.signal == Signal(samples=(batch,), minibatches=3, arm="grpo_outcome", objectives=("grpo", "sft"))
    assert load_study(_study_with(tmp_path, None)).signal is None


def test_the_arms_own_overrides_set_its_batch_size(tmp_path):
    # 24 x 3 = 72 samples a step: the overrides win over the method config, as the trainer's parser layers them
    arm = {"method": "grpo_outcome", "overrides": {"per_device_train_batch_size": 24, "gradient_accumulation_steps": 3}}
    study = load_study(_study_with(tmp_path, {"arm": "big", "samples": [72], "minibatches": 3}, big=arm))
    assert study.signal.samples == (72,)
    with pytest.raises(UserError, match=r"signal\.samples: \[144\] lacks 72, the samples a step big trains at"):
        load_study(_study_with(tmp_path, {"arm": "big", "samples": [144], "minibatches": 3}, big=arm))


def _good(b: int, **fields) -> dict:
    return {"samples": [b], "minibatches": 3, **fields}


#: Each bad section and the message it gives, as functions of the arm's samples a step `b` and group size `g`.
BAD_SECTIONS = {
    "not a mapping": lambda b, g: ([b], r"signal: expected a mapping"),
    "unknown field": lambda b, g: (_good(b, rank=4), r"signal: unknown field\(s\) \['rank'\]"),
    "unknown arm": lambda b, g: (_good(b, arm="grpo"), r"signal\.arm: unknown arm 'grpo'; the study has sft, rft"),
    "arm not a name": lambda b, g: (_good(b, arm=["sft"]), r"signal\.arm: unknown arm \['sft'\]"),
    "offline arm": lambda b, g: (_good(b, arm="sft"), r"signal\.arm: sft's method sft samples no groups"),
    "no samples": lambda b, g: ({"minibatches": 3}, r"signal: missing `samples`"),
    "empty samples": lambda b, g: (_good(b, samples=[]), r"signal: `samples` must be a non-empty list"),
    "samples 0": lambda b, g: (_good(b, samples=[b, 0]), r"signal\.samples: expected integers >= 1"),
    "samples twice": lambda b, g: (_good(b, samples=[b, b]), rf"signal\.samples: repeats \[{b}\]"),
    "no arm's batch": lambda b, g: (
        _good(b, samples=[2 * b]),
        rf"signal\.samples: \[{2 * b}\] lacks {b}, the samples a step grpo_outcome trains at",
    ),
    "part of a group": lambda b, g: (
        _good(b, samples=[b, b + 1]),
        rf"signal\.samples: \[{b + 1}\] not a multiple of grpo_outcome's group size {g}",
    ),
    "no minibatches": lambda b, g: ({"samples": [b]}, r"signal: missing `minibatches`"),
    "2 minibatches": lambda b, g: (
        _good(b, minibatches=2),
        r"signal\.minibatches: must be in \[3, inf\), got 2 \(at least 3",
    ),
    "minibatches 3.5": lambda b, g: (_good(b, minibatches=3.5), r"signal\.minibatches: expected an integer"),
    "unknown objective": lambda b, g: (
        _good(b, objectives=["grpo", "dpo"]),
        r"signal\.objectives: expected a non-empty list of grpo, sft",
    ),
    "no objective": lambda b, g: (_good(b, objectives=[]), r"signal\.objectives: expected a non-empty list"),
    "objective a mapping": lambda b, g: (_good(b, objectives=[{"sft": 1}]), r"signal\.objectives: expected a"),
    "objective twice": lambda b, g: (
        _good(b, objectives=["sft", "sft"]),
        r"signal\.objectives: repeats one of \['sft', 'sft'\]",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SECTIONS))
def test_bad_signal_section_names_the_file_and_the_field(tmp_path, case):
    section, message = BAD_SECTIONS[case](*_arm_batch())
    path = _study_with(tmp_path, section)
    with pytest.raises(UserError, match=message) as err:
        load_study(path)
    assert str(err.value).startswith(f"{path}: signal")


def test_an_sft_only_signal_needs_no_whole_groups(tmp_path):
    batch, _ = _arm_batch()
    study = load_study(_study_with(tmp_path, {"samples": [batch, batch + 1], "minibatches": 3, "objectives": ["sft"]}))
    assert study.signal.samples == (batch, batch + 1)


def test_arms_of_a_run_keep_the_signal_only_with_its_arm():
    study = load_study(STUDY)
    assert study.only(["grpo_outcome", "outcome_skip"]).signal == study.signal
    assert study.only(["sft", "dpo"]).signal is None  # the run trains at no batch size the signal was measured for
    assert study.trimmed(values_per_axis=2, seeds=2).signal == study.signal


# --- the stage -------------------------------------------------------------------------------------------------


def _row(objective: str, samples: int, mean: float, low: float | None = None, high: float | None = None) -> dict:
    group = 8 if objective == "grpo" else 1
    return {
        "objective": objective,
        "samples": samples,
        "prompts": samples // group,
        "group_size": group,
        "lora_rank": 0,
        "mean_cosine": mean,
        "low": low,
        "high": high,
        "zero_std_share": 0.5 if objective == "grpo" else None,
        "interval": "95% jackknife over minibatches (t, 15 df)",
        "seconds": 1.0,
    }


@pytest.fixture
def measured(monkeypatch):
    """The stage with the model and the measurement faked: the calls of `measure_signal`, in order."""
    calls = []

    def fake_measure(model, tokenizer, task, objective, samples, minibatches, **kwargs):
        calls.append((objective, samples, minibatches, kwargs["group_size"], kwargs["max_completion_length"]))
        return _row(objective, samples, 0.1)

    monkeypatch.setattr(stage_zero, "load_model_and_tokenizer", lambda name: (torch.nn.Linear(1, 1), None))
    monkeypatch.setattr(signal_measure, "measure_signal", fake_measure)
    return calls


def test_the_stage_measures_once_and_again_only_when_its_settings_change(tmp_path, measured, capsys):
    study = load_study(STUDY)
    options = StudyOptions(base=study.base, configs=str(study.configs_dir), quick=False, progress=False)
    batch, group = _arm_batch()
    first = stage_zero.run_signal_stage(study, tmp_path, options)
    grid = [(o, n) for o in ("grpo", "sft") for n in study.signal.samples]
    assert [c[:2] for c in measured] == grid and {c[2:] for c in measured} == {(study.signal.minibatches, group, 48)}
    recorded = json.loads((tmp_path / SIGNAL_FILE).read_text())
    assert recorded == first and recorded["settings"]["arm_samples"] == batch and len(recorded["rows"]) == len(grid)

    assert stage_zero.run_signal_stage(study, tmp_path, options) == first  # the same settings: read, not measured
    assert len(measured) == len(grid) and "holds these settings; reused" in capsys.readouterr().out

    fewer = dataclasses.replace(study.signal, minibatches=4)
    again = stage_zero.run_signal_stage(dataclasses.replace(study, signal=fewer), tmp_path, options)
    assert len(measured) == 2 * len(grid) and again["settings"]["minibatches"] == 4
    assert (
        f"other settings (minibatches: {study.signal.minibatches!r} -> 4); measuring again" in capsys.readouterr().out
    )
    assert read_signal(tmp_path)["settings"]["minibatches"] == 4


def test_quick_measures_the_arms_quick_batch_only(tmp_path, measured):
    study = load_study(STUDY)
    options = StudyOptions(
        base=study.base,
        configs=str(study.configs_dir),
        quick=True,
        progress=False,
        quick_flags="--max_steps 2",
        quick_method_flags={"online": "--per_device_train_batch_size 16 --num_generations 4"},
    )
    settings = stage_zero.run_signal_stage(study, tmp_path, options)["settings"]
    assert measured == [("grpo", 16, 3, 4, 48), ("sft", 16, 3, 4, 48)]
    assert settings["samples"] == [16] and settings["arm_samples"] == 16 and settings["quick"] is True


# --- the report ---------------------------------------------------------------------------------------------------


def _signal() -> dict:
    settings = {
        "model": "embedded",
        "arm": "grpo_outcome",
        "arm_samples": 64,
        "samples": [16, 64, 256],
        "minibatches": 16,
        "num_generations": 8,
        "max_completion_length": 48,
        "loss_type": "dapo",
        "temperature": 1.0,
        "lora_rank": 0,
    }
    rows = [
        _row("grpo", 16, 0.01, -0.01, 0.03),
        _row("grpo", 64, 0.04, 0.02, 0.06),
        _row("grpo", 256, 0.15, 0.12, 0.18),
        _row("sft", 64, 0.3, 0.25, 0.35),
        _row("sft", 256, 0.6, None, None),
    ]
    return {"settings": settings, "device": "cpu", "rows": rows}


def test_the_section_marks_the_arms_row_and_states_its_cosine():
    text = "\n".join(render_signal(_signal()))
    marked = [line for line in text.splitlines() if "(arms)" in line]
    assert marked == [
        "| grpo | **64** (arms) | 8 x 8 | full | +0.0400 | [+0.0200, +0.0600] | 0.50 | 1.0 |",
        "| sft | **64** (arms) | 64 x 1 | full | +0.3000 | [+0.2500, +0.3500] | - | 1.0 |",
    ]
    assert "| grpo | 16 | 2 x 8 | full | +0.0100 |" in text and "| sft | 256 | 256 x 1 | full | +0.6000 | - |" in text
    assert (
        "The arms train at 64 samples a step (grpo_outcome's per_device_train_batch_size x "
        "gradient_accumulation_steps), where the cosine is +0.0400 [+0.0200, +0.0600] (grpo); "
        "+0.3000 [+0.2500, +0.3500] (sft)."
    ) in text
    assert "16 independent minibatches" in text and "95% jackknife over minibatches" in text


def test_the_report_shows_the_section_between_the_design_and_the_search_and_only_with_a_signal(tmp_path):
    from grpo_ext.experiments.study.report_md import render

    study = load_study(STUDY)
    stats = {
        "expectations": [],
        "k_max": 4,
        "base": {m: {"mean": 0.5, "low": 0.4, "high": 0.6} for m in ("pass@1", "maj@4", "pass@4")},
        "arms": {},
        "extensions": {},
        "findings": [],
    }
    search = {"scores": {}, "picks": {}}
    sections = [line for line in render(study, search, stats, None, signal=_signal()).splitlines() if line[:3] == "## "]
    assert sections[1:4] == ["## Design", TITLE, "## Search (validation)"]
    assert TITLE not in render(study, search, stats, None)
    assert read_signal(tmp_path) is None  # no signal.json: no section


def test_a_signal_measured_on_other_weights_of_the_same_base_name_is_measured_again(tmp_path, measured, capsys):
    """`base: <folder>` rebuilt in place (a new base, same name): signal.json of the old weights is not reused."""
    import shutil

    from grpo_ext.model_paths import EMBEDDED_MODEL_DIR

    base = tmp_path / "base"
    shutil.copytree(EMBEDDED_MODEL_DIR, base)
    study = dataclasses.replace(load_study(STUDY), base=str(base))
    options = StudyOptions(base=study.base, configs=str(study.configs_dir), quick=False, progress=False)
    out = tmp_path / "study"
    stage_zero.run_signal_stage(study, out, options)
    first = len(measured)
    stage_zero.run_signal_stage(study, out, options)
    assert len(measured) == first  # the same weights: reused
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-5}))  # other weights' config
    stage_zero.run_signal_stage(study, out, options)
    assert len(measured) == 2 * first and "model_fingerprint" in capsys.readouterr().out
