"""The study's cost at the rates its runs measured (issue 49 part 3): evaluation rates by samples a prompt in the
budget, the rates read back from a study folder's records (hand-made), and the whole study priced at them by hand."""

from __future__ import annotations

import json

import pytest

from grpo_ext.errors import UserError
from grpo_ext.experiments.study.budget import estimate, eval_rate
from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.spent import measured_rates, render_measured_rates, render_spent, spent
from grpo_ext.methods.cost import COST_FILE
from tests.experiments.study.test_real_study import _tiny_study

COMMON = {"task": "arithmetic", "train_size": 10, "max_steps": 5, "per_device_train_batch_size": 4}
BODY = """
search_seed: 9
seeds: [0, 1]
learning_rates: [1.0e-4]
validation: {split: validation, limit: 10, n: 2}
test: {split: test, limit: 20, n: 4, n_by: {base: 16}}
arms:
  grpo_outcome: {method: grpo_outcome}
  more_sft: {method: sft}
budget:
  core_hours: 1
  seconds_per_sequence: {online: 2.0, sft: 1.0, rft: 1.0, dpo: 3.0}
  eval_samples_per_second: {trained: %s, base: %s}
"""


def _study(tmp_path, trained="10", base="5", start=""):
    configs = {"grpo_outcome": {**COMMON, "method": "grpo_outcome"}, "sft": {**COMMON, "method": "sft"}}
    return load_study(_tiny_study(tmp_path, configs, BODY % (trained, base) + start))


def test_an_evaluation_rate_by_n_is_the_listed_n_nearest_below():
    assert eval_rate(7, 64) == 7.0
    by_n = {4: 4.0, "16": 8.0, 64: 16.0}  # YAML keys may come as text
    assert [eval_rate(by_n, n) for n in (1, 4, 8, 16, 63, 64, 500)] == [4.0, 4.0, 4.0, 8.0, 8.0, 16.0, 16.0]


@pytest.mark.parametrize("bad", ["{4: 0}", "{four: 3}", "{}", "-1", "fast"])
def test_a_bad_evaluation_rate_is_named(tmp_path, bad):
    with pytest.raises(UserError, match="eval_samples_per_second.trained must be a positive rate"):
        estimate(_study(tmp_path, bad))


def test_the_estimate_prices_each_evaluation_at_its_n(tmp_path):
    rows = {r["what"]: r for r in estimate(_study(tmp_path, "{2: 4, 16: 32}", "{2: 1, 16: 8}"))["rows"]}
    # test n=4 priced at n=2's rate (the nearest below): 2 test seeds, no search (one setting)
    assert rows["grpo_outcome (online)"]["eval_core_seconds"] == 2 * (20 * 4 / 4)
    # the base (no `start` section: the raw model, the base's rates): validation 10 x 2 at 1/s, test 20 x 16 at 8/s
    assert rows["base (no training)"]["eval_core_seconds"] == 10 * 2 / 1 + 20 * 16 / 8


def _run(folder, cost: dict, evaluations: dict[str, tuple[int, int, float]]):
    folder.mkdir(parents=True)
    (folder / COST_FILE).write_text(json.dumps(cost))
    for split, (n, generated, seconds) in evaluations.items():
        record = {"study_evaluation": {}, "n": n, "samples": {"generated": generated, "seconds": seconds}}
        (folder / f"{split}.json").write_text(json.dumps(record))


def test_measured_rates_and_the_study_priced_at_them(tmp_path):
    study = _study(tmp_path)
    out = tmp_path / "out"
    runs = out / "runs" / "grpo_outcome" / "lr0.0001"
    _run(runs / "seed0", {"trained_sequences": 40, "train_seconds": 100.0, "curve_seconds": 50.0},
         {"test": (4, 80, 20.0)})  # fmt: skip
    _run(runs / "seed1", {"trained_sequences": 40, "train_seconds": 140.0}, {"test": (4, 80, 12.0)})
    # the start (the base here: no `start` section, so it is the raw model priced at the base's rate)
    _run(out / "base", {}, {"validation": (2, 20, 10.0), "test": (16, 0, 0.0)})  # a test resumed whole from cache
    rates = measured_rates(study, out)
    assert rates["seconds_per_sequence"] == {"online": 3.0, "sft": 1.0, "rft": 1.0, "dpo": 3.0}  # 240 s / 80
    assert rates["eval_samples_per_second"] == {"trained": {4: 160 / 32.0}, "base": {2: 2.0}}
    assert rates["measured"]["seconds_per_sequence"] == {"online": {"runs": 2, "sequences": 80}}
    projected = estimate(study, rates)
    rows = {r["what"]: r for r in projected["rows"]}
    # grpo: 2 test runs x 5 steps x 4 sequences x 3 s; test 20 x 4 at 5/s; sft at the plan's 1 s, evaluated at 5/s
    assert rows["grpo_outcome (online)"]["train_core_seconds"] == 2 * 60.0
    assert rows["grpo_outcome (online)"]["eval_core_seconds"] == 2 * 80 / 5.0
    assert (rows["more_sft (sft)"]["train_core_seconds"], rows["more_sft (sft)"]["eval_core_seconds"]) == (40.0, 32.0)
    # the base at 2/s whatever n (n = 2 is the only one measured, below 16)
    assert rows["base (no training)"]["eval_core_seconds"] == (10 * 2 + 20 * 16) / 2.0
    planned = estimate(study)
    text = render_measured_rates(rates, projected, planned)
    assert "online 3.00 s a sequence (2 runs)" in text and "5.0 at n = 4" in text and "2.0 at n = 2" in text
    assert projected["core_hours"] == pytest.approx((120 + 32 + 40 + 32 + 170) / 3600)
    assert "**0.1 core-hours** (fits), planned" in text
    rates["seconds_per_sequence"]["online"] = 300.0  # 2 x 20 x 300 s: 3.3 core-hours against the limit of 1
    assert "(**over**)" in render_measured_rates(rates, estimate(study, rates), planned)


def test_no_run_measured_means_the_plan(tmp_path):
    study = _study(tmp_path)
    rates = measured_rates(study, tmp_path / "empty")
    assert estimate(study, rates)["core_hours"] == estimate(study)["core_hours"]
    assert render_measured_rates(rates, estimate(study, rates), estimate(study)).startswith("No rate measured yet")


def test_the_start_is_spent_beside_its_plan_and_its_sft_counts_toward_the_sft_rate(tmp_path):
    """The start's SFT run (<out>/start/adapter, as results/sft_study/start) is a row of its own named as the
    estimate's, and its seconds a sequence are SFT's until an arm's SFT run adds to them."""
    study = _study(tmp_path, start="start: {method: sft, learning_rate: 1.0e-3, label: SFT start}\n")
    out = tmp_path / "out"
    _run(out / "start" / "adapter", {"trained_sequences": 20, "train_seconds": 50.0, "wall_seconds": 50.0,
                                     "curve_seconds": 22.0}, {})  # fmt: skip
    _run(out / "base", {}, {"test": (16, 320, 40.0)})
    rows = {r["what"]: r for r in spent(study, out)["rows"]}
    assert rows["start (SFT start)"] == {"what": "start (SFT start)", "runs": 1, "train_core_seconds": 72.0,
                                         "eval_core_seconds": 0.0}  # fmt: skip
    # the start's evaluations are the base run's, named as the estimate names it
    assert rows["SFT start (no training)"]["eval_core_seconds"] == 40.0 and "base (no training)" not in rows
    planned = {r["what"]: r for r in estimate(study)["rows"]}
    # every measured row has its plan beside it (render_spent pairs them by the name before " (")
    assert {w.split(" (")[0] for w in rows} == {w.split(" (")[0] for w in planned}
    table = render_spent(spent(study, out), estimate(study)).splitlines()
    start = planned["start (SFT start)"]["train_core_seconds"] / 3600  # 5 steps x 4 sequences x 1 s
    assert f"| start (SFT start) | 1 | 0.02 | 0.00 | 1 | {start:.2f} |" in table
    # 50 s over 20 sequences: 2.5 s a sequence for the sft runner, from the start alone so far
    rates = measured_rates(study, out)
    assert rates["seconds_per_sequence"]["sft"] == 2.5
    assert rates["measured"]["seconds_per_sequence"] == {"sft": {"runs": 1, "sequences": 20}}
    # a more_sft run adds to the same runner: (50 + 30) s over (20 + 20) sequences
    _run(out / "runs" / "more_sft" / "lr0.0001" / "seed0", {"trained_sequences": 20, "train_seconds": 30.0}, {})
    assert measured_rates(study, out)["seconds_per_sequence"]["sft"] == 2.0
