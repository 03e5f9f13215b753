"""Each arm against the base per slice (grpo_ext.experiments.compare.slices), as the method comparison and the study
report show it: seed means and paired differences computed by hand on a tiny set."""

import pytest

from grpo_ext.evaluation.harness import score_samples, validate_problems
from grpo_ext.experiments.compare.slices import arm_slices, arm_slices_markdown
from grpo_ext.tasks import get_task
from grpo_ext.tasks.arithmetic import Problem

TASK = get_task("arithmetic")
PROMPTS = ["1+2=", "3+4=", "5+1=", "9-2=", "8-3=", "7-5="]  # three additions, three subtractions
N = 4


def _result(n_correct: list[int]) -> dict:
    problems = validate_problems([{"prompt": p, "answer": str(Problem.from_prompt(p).answer)} for p in PROMPTS], TASK)
    completions = [[f"#{p['answer']}"] * c + ["#999"] * (N - c) for p, c in zip(problems, n_correct, strict=True)]
    summary, per_problem = score_samples(TASK, problems, completions, [1, 4])
    return {"model": "m", "n": N, "ks": [1, 4], "taus": [0.5], **summary, "per_problem": per_problem}


BASE = _result([1, 1, 1, 0, 0, 0])
# the arm learned additions only: every + problem right, - as before, in both seeds (seed 1 one sample less)
ARM = [_result([4, 4, 4, 0, 0, 0]), _result([4, 4, 3, 0, 0, 0])]


def test_each_arm_against_the_base_per_slice_by_hand():
    slices = arm_slices({"grpo": ARM}, BASE, ["operation"], min_problems=3)
    plus, minus = slices["operation"]
    assert (plus["value"], plus["n_problems"], plus["base"]) == ("+", 3, 0.25)
    arm = plus["arms"]["grpo"]
    # seed means over the + problems: 1.0 and 11/12; their mean 23/24; minus the base's 0.25
    assert arm["mean"] == pytest.approx(23 / 24)
    assert arm["difference"]["difference"] == pytest.approx(23 / 24 - 0.25)
    assert arm["difference"]["per_seed"] == pytest.approx([0.75, 11 / 12 - 0.25])
    # per problem: +0.75, +0.75, +0.625; any resample's mean lies in [0.625, 0.75], so the interval excludes 0
    assert 0.625 <= arm["difference"]["low"] <= arm["difference"]["high"] <= 0.75
    d = minus["arms"]["grpo"]["difference"]
    assert (minus["base"], d["difference"], d["low"], d["high"]) == (0.0, 0.0, 0.0, 0.0)
    md = "\n".join(arm_slices_markdown(slices))
    assert "| + | 3 | 0.250 | 0.958 (**+0.708 [" in md and "| - | 3 | 0.000 | 0.000 (+0.000 [+0.000, +0.000]) |" in md


def test_a_small_slice_has_no_interval_and_an_arm_on_other_problems_is_left_out():
    other = {**ARM[0], "per_problem": ARM[0]["per_problem"][:5]}
    slices = arm_slices({"grpo": ARM, "elsewhere": [other]}, BASE, ["operation"])  # 10 problems for an interval
    plus = slices["operation"][0]
    assert list(plus["arms"]) == ["grpo"] and plus["interval"] is False
    assert plus["arms"]["grpo"]["difference"]["low"] is None
    assert "| + | 3 (too few for an interval) | 0.250 | 0.958 (+0.708) |" in "\n".join(arm_slices_markdown(slices))
    old = {**BASE, "per_problem": [{k: v for k, v in p.items() if k != "attributes"} for p in BASE["per_problem"]]}
    assert arm_slices({"grpo": ARM}, old) == {}  # results written before slices: none
