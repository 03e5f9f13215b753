"""The study's second round: expectations written before the run (parsed, judged, first in the report), and one
learning rate for the GRPO family through the driver's two search stages."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.expectations import Expectation, judge_expectations, render_expectations
from grpo_ext.experiments.study.report_md import rate_text, render

ROOT = Path(__file__).resolve().parents[3]
STUDY = ROOT / "configs" / "compare.yaml"


def _result(correct: list[int], n: int = 4, maj: list[float] | None = None) -> dict:
    """A harness result: problem i has correct[i] of n samples right (and maj@n = maj[i] when given)."""
    rows = [{"problem_id": i, "n_correct": c, "n_extracted": n} for i, c in enumerate(correct)]
    for row, value in zip(rows, maj or [], strict=False):
        row["maj@k"] = {"1": row["n_correct"] / n, str(n): value}
    return {"n": n, "per_problem": rows}


def _expectation(arm="a", against="b", metric="pass@1", min_difference=0.0, minus=None) -> Expectation:
    return Expectation("e", arm, against, metric, "text", min_difference, minus)


# 40 problems; the arm's two seeds are right 3 or 4 of 4 where the reference is right 2 of 4: +0.25..+0.5 a problem
BETTER = [_result([3, 4, 3, 4] * 10), _result([4, 3, 4, 3] * 10)]
WORSE = [_result([2] * 40), _result([2] * 40)]


def test_shipped_expectations_are_outcome_above_base_majk_over_passk_and_each_extension_against_its_baseline():
    expectations = load_study(STUDY).expectations
    outcome = expectations["outcome_above_base"]
    assert (outcome.arm, outcome.against, outcome.metric, outcome.min_difference) == (
        "grpo_outcome", "base", "pass@1", 0.03,
    )  # fmt: skip
    majk = expectations["majk_over_passk"]
    assert (majk.arm, majk.against, majk.metric, majk.minus) == ("grpo_outcome", "base", "maj@64", "pass@64")
    against = {(e.arm, e.against) for e in expectations.values() if e.metric == "pass@1" and e.min_difference == 0}
    assert against == {
        ("grpo_process", "grpo_outcome"), ("outcome_skip", "grpo_outcome"), ("outcome_refill", "grpo_outcome"),
        ("outcome_adaptive_beta", "outcome_fixed_beta"), ("process_refill", "grpo_process"),
    }  # fmt: skip


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("{arm: grpo_outcome, against: base, metric: pass@1,", "{arm: grpo, against: base, metric: pass@1,",
         r"expectations\.outcome_above_base\.arm: unknown arm 'grpo'"),
        ("{arm: grpo_outcome, against: base, metric: pass@1,", "{arm: grpo_outcome, against: bas, metric: pass@1,",
         r"expectations\.outcome_above_base\.against: unknown arm 'bas'; expected base or one of sft"),
        ("{arm: grpo_outcome, against: base, metric: pass@1,", "{arm: grpo_outcome, against: base, metric: acc@1,",
         r"outcome_above_base\.metric: expected pass@K or maj@K with K one of \[1, 2, 4, 8, 16, 32, 64\]"),
        ("minus: pass@64", "minus: pass@128", r"expectations\.majk_over_passk\.minus: expected pass@K or maj@K"),
        ("min_difference: 0.03", "min_difference: lots", r"outcome_above_base\.min_difference: expected a number"),
        ("min_difference: 0.03", "min_diff: 0.03", r"outcome_above_base: unknown field\(s\) \['min_diff'\]"),
        ("min_difference: 0.03", "min_difference: 0.03, question: maybe",
         r"outcome_above_base\.question: expected true or false, got 'maybe'"),
        ("{arm: grpo_process, against: grpo_outcome,", "{arm: grpo_process, against: grpo_process,",
         r"process_vs_outcome\.against: an arm against itself"),
    ],
)  # fmt: skip
def test_a_bad_expectation_names_its_field(tmp_path, old, new, message):
    shipped = STUDY.read_text()
    assert old in shipped
    path = tmp_path / "study.yaml"
    path.write_text(shipped.replace(old, new))
    with pytest.raises(ValueError, match=message):
        load_study(path)


def test_held_needs_the_minimum_and_the_studys_rule():
    arms = {"a": BETTER, "b": WORSE}
    # +0.375 by hand: (3.5 - 2) / 4 a problem on average; the interval above 0 and both seeds positive
    row = judge_expectations({"e": _expectation()}, arms, None)[0]
    assert row["difference"]["difference"] == pytest.approx(0.375) and row["verdict"] == "agrees" and row["held"]
    # the same evidence with a minimum above the difference: not held
    assert judge_expectations({"e": _expectation(min_difference=0.4)}, arms, None)[0]["held"] is False
    # a difference above the minimum on average, but one seed the other way round: the rule says inconclusive
    mixed = {"a": [BETTER[0], _result([1] * 40)], "b": WORSE}
    row = judge_expectations({"e": _expectation(min_difference=-1.0)}, mixed, None)[0]
    assert row["difference"]["difference"] > -1.0 and row["verdict"] == "inconclusive" and row["held"] is False
    # an arm left out of the run, or a K the test did not draw: not measured, said why
    rows = judge_expectations({"e": _expectation(arm="c"), "f": _expectation(metric="pass@64")}, arms, None)
    assert [r["held"] for r in rows] == [None, None]
    assert rows[0]["why"] == "no run of c" and "drew 4 samples a problem, fewer than K = 64" in rows[1]["why"]


def test_an_expectation_against_the_base_judges_every_seed():
    """The base is one model: each of the arm's seeds is measured against it (the numbers by hand in test_study.py's
    test of paired_difference)."""
    base = _result([2] * 40, maj=[0.5] * 40)
    arm = [_result([2] * 40, maj=[0.9] * 40), _result([3] * 40, maj=[1.0] * 40)]
    row = judge_expectations({"e": _expectation(against="base", metric="maj@4", minus="pass@4")}, {"a": arm}, base)
    assert row[0]["difference"]["per_seed"] == pytest.approx([0.4, 0.5])
    assert row[0]["held"] is True and row[0]["measured"] == "(maj@4 gain) - (pass@4 gain) of a over base"
    text = "\n".join(render_expectations(row))
    assert "| text | (maj@4 gain) - (pass@4 gain) of a over base | +0.000 | +0.450 [+0.450, +0.450]" in text
    assert "**held** (agrees)" in text
    # pass@1: seed 0 equals the base, so the rule cannot say "beats" whatever the mean
    row = judge_expectations({"e": _expectation(against="base")}, {"a": arm}, base)[0]
    assert row["difference"]["per_seed"] == pytest.approx([0.0, 0.25]) and row["held"] is False


def test_report_opens_with_the_expectations_and_says_each_extension_ran_at_its_references_rate():
    study = load_study(STUDY)
    search = {
        "scores": {"grpo_outcome": {"lr2e-05": 0.5, "lr5e-05": 0.6}, "outcome_skip": {"lr5e-05": 0.55}},
        "picks": {
            "grpo_outcome": {"slug": "lr5e-05", "lr": 5e-05},
            "outcome_skip": {"slug": "lr5e-05", "lr": 5e-05},
            "sft": {"slug": "lr2e-05", "lr": 2e-05},
        },
        "rate_of": {"outcome_skip": {"arm": "grpo_outcome", "lr": 5e-05}},
    }
    assert rate_text(search, "outcome_skip", "grpo_outcome") == "at its reference's rate: 5e-05 (grpo_outcome's pick)"
    assert rate_text(search, "sft", "grpo_outcome").startswith("**not at its reference's rate**: 2e-05 (sft's pick)")
    rows = judge_expectations({"e": _expectation()}, {"a": BETTER, "b": WORSE}, None)
    difference = {"difference": 0.01, "low": -0.02, "high": 0.04, "per_seed": [0.01, 0.01]}
    stats = {
        "expectations": rows,
        "k_max": 4,
        "base": {m: {"mean": 0.5, "low": 0.4, "high": 0.6} for m in ("pass@1", "maj@4", "pass@4")},
        "arms": {},
        "extensions": {
            "skip": {
                "arm": "outcome_skip",
                "against": "grpo_outcome",
                "differences": {m: difference for m in ("pass@1", "maj@4", "pass@4")},
                "reach": None,
            }
        },
        "findings": [],
    }
    md = render(study, search, stats, None)
    sections = [line for line in md.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Expectations (written in the study config before the run)"
    assert "| text | pass@1: a - b | +0.000 | +0.375" in md
    assert "| outcome_skip (at grpo_outcome's rate) | lr5e-05 **(pick)** | 0.550 |" in md
    assert "| skip | outcome_skip - grpo_outcome | at its reference's rate: 5e-05 (grpo_outcome's pick) |" in md
    assert "trained with seed 100" in md and "seeds 0, 1, 2 (the search seed is none of them)" in md
