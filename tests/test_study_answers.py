"""What the study's test samples say (grpo_ext.methods.study.answers) and the baselines beside the base in the study
report (grpo_ext.methods.study.report): counts worked by hand on a tiny word_arithmetic set where an arm learned the
shortcut "add the two numbers"."""

import pytest

from grpo_ext.evaluation.harness import score_samples, validate_problems
from grpo_ext.methods.study.answers import answers_markdown, sample_rows, samples_markdown, study_answers
from grpo_ext.tasks import get_task

TASK = get_task("word_arithmetic", min_operands=2, max_operands=2, num_fewshot=0)
QUESTION = "Question: Leo has 34 apples. Then Leo {} apples. How many apples does Leo have now?\nAnswer:"
ROWS = [
    {"prompt": QUESTION.format("finds 22 more"), "answer": "56"},
    {"prompt": QUESTION.format("sells 22"), "answer": "12"},
]
N = 2
RIGHT_PLUS, RIGHT_MINUS = "34 + 22 = 56\n#### 56", "34 - 22 = 12\n#### 12"
SUM_FOR_MINUS = "34 + 22 = 56"  # every step true, the wrong plan, no strict answer
FALSE_STEP = "34 - 22 = 10\n#### 10"  # a false step: wrong arithmetic, in the strict form


def _result(completions: list[list[str]], model: str = "m") -> dict:
    problems = validate_problems(ROWS, TASK)
    summary, per_problem = score_samples(TASK, problems, completions, [1, 2])
    excerpt = [
        {"problem_id": p["problem_id"], "sample_index": i, "question": p["prompt"], "answer": p["answer"],
         "completion": c, "kind": None}
        for p, comps in zip(per_problem, completions, strict=True)
        for i, c in enumerate(comps)
    ]  # fmt: skip
    return {"model": model, "n": N, "ks": [1, 2], **summary, "per_problem": per_problem, "excerpt": excerpt}


BASE = _result([[RIGHT_PLUS, FALSE_STEP], [FALSE_STEP, RIGHT_MINUS]])
# the shortcut: additions right, subtractions answered with the sum, in both seeds (seed 1 one false step)
ARM = [
    _result([[RIGHT_PLUS, RIGHT_PLUS], [SUM_FOR_MINUS, SUM_FOR_MINUS]]),
    _result([[RIGHT_PLUS, RIGHT_PLUS], [SUM_FOR_MINUS, FALSE_STEP]]),
]


def test_the_shortcut_shows_as_wrong_plan_on_subtractions_by_hand():
    answers = study_answers({"base": [BASE], "grpo": ARM}, "operation")
    grpo = answers["grpo"]
    # 8 samples over both seeds: 4 right (+), 3 sums for a subtraction (wrong plan), 1 false step
    assert grpo["all"]["samples"] == 8
    assert grpo["all"]["counts"]["right"] == 4 and grpo["all"]["counts"]["wrong_plan"] == 3
    assert grpo["all"]["counts"]["wrong_arithmetic"] == 1
    minus = grpo["by"]["-"]
    assert minus["shares"]["wrong_plan"] == pytest.approx(3 / 4) and minus["shares"]["right"] == 0.0
    assert grpo["by"]["+"]["shares"]["right"] == 1.0
    # strict form: the 4 right additions and the false step are `#### n`; the sums are not
    assert grpo["all"]["strict_share"] == pytest.approx(5 / 8) and grpo["all"]["right_strict_share"] == 0.5
    base = answers["base"]
    assert base["all"]["counts"]["right"] == 2 and base["all"]["counts"]["wrong_arithmetic"] == 2
    md = "\n".join(answers_markdown(answers, "operation", TASK.strict_form))
    assert "operation = -:" in md and "| grpo | 4 | 0.000 | 0.250 | 0.750 |" in md


def test_a_result_written_before_the_anatomy_is_left_out():
    old = {**BASE, "per_problem": [{k: v for k, v in p.items() if k != "anatomy"} for p in BASE["per_problem"]]}
    assert set(study_answers({"old": [old], "grpo": ARM}, "operation")) == {"grpo"}
    assert answers_markdown({}, "operation", None) == []


def test_samples_show_each_model_on_the_first_problem_of_each_operation():
    rows = sample_rows({"base": [BASE], "grpo": ARM}, "operation")
    assert [(r["value"], r["model"], r["completion"]) for r in rows] == [
        ("+", "base", RIGHT_PLUS),
        ("+", "grpo", RIGHT_PLUS),
        ("-", "base", FALSE_STEP),
        ("-", "grpo", SUM_FOR_MINUS),  # the first run's first sample of the subtraction: the sum
    ]
    md = "\n".join(samples_markdown(rows, "operation"))
    assert "(operation = -, answer 12): Leo has 34 apples. Then Leo sells 22 apples." in md
    assert "| grpo | - | 34 + 22 = 56 |" in md and "34 + 22 = 56 ⏎ #### 56" in md  # new lines shown as ⏎
