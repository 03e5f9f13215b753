"""A study's stage 0 (issue 28): the `signal` section of the study YAML."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from grpo_ext.errors import UserError
from grpo_ext.methods.study.config import Signal, load_study
from grpo_ext.methods.study.signal.settings import arm_values

ROOT = Path(__file__).resolve().parents[1]
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
