"""What the study's test samples say (grpo_ext.experiments.study.answers) and the baselines beside the base in the study
report (grpo_ext.experiments.study.report): counts worked by hand on a tiny word_arithmetic set where an arm learned the
shortcut "add the two numbers"."""

import pytest

from grpo_ext.evaluation.harness import score_samples, validate_problems
from grpo_ext.experiments.study.answers import answers_markdown, sample_rows, samples_markdown, study_answers
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


def test_the_measured_cost_adds_each_runs_records_by_hand(tmp_path):
    import json
    from pathlib import Path

    from grpo_ext.experiments.study.budget import estimate
    from grpo_ext.experiments.study.config import load_study
    from grpo_ext.experiments.study.spent import render_spent, spent

    study = load_study(Path(__file__).resolve().parents[3] / "configs" / "real" / "study.yaml")

    def write(folder, cost=None, seconds=None):
        folder.mkdir(parents=True)
        if cost is not None:
            (folder / "training_cost.json").write_text(json.dumps(cost))
        if seconds is not None:
            record = {"study_evaluation": {"run": "x"}, "samples": {"seconds": seconds, "scoring_seconds": 10.0}}
            (folder / "validation.json").write_text(json.dumps(record))

    # two SFT search runs: 600 s + 100 s of curve, 290 + 10 s of evaluation each; one run unfinished (no cost file)
    write(tmp_path / "runs/sft/lr0.001/seed100", {"wall_seconds": 600.0, "curve_seconds": 100.0}, 290.0)
    write(tmp_path / "runs/sft/lr0.0003/seed100", {"wall_seconds": 600.0, "curve_seconds": 100.0}, 290.0)
    write(tmp_path / "runs/rft/lr0.001/seed100")
    write(tmp_path / "base", seconds=3590.0)
    (tmp_path / "base" / "other.json").write_text("[1, 2]")  # not an evaluation: ignored
    result = spent(study, tmp_path)
    rows = {r["what"]: r for r in result["rows"]}
    assert rows["sft"] == {"what": "sft", "runs": 2, "train_core_seconds": 1400.0, "eval_core_seconds": 600.0}
    assert rows["rft"]["runs"] == 0 and rows["fewshot8 (no training)"]["runs"] == 0
    assert rows["base (no training)"]["eval_core_seconds"] == 3600.0
    assert result["core_hours"] == pytest.approx((1400 + 600 + 3600) / 3600)
    table = render_spent(result, estimate(study))
    assert "| sft | 2 | 0.39 | 0.17 | 5 | 1.02 |" in table and "Measured: 1.6 core-hours" in table
