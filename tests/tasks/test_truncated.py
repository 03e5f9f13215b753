"""A sample cut off at the length cap has no answer (issue 48): the rule that tells one (`truncated_at_cap`), the
task's rewards given `completion_truncated`, and the harness's scoring where the budget is known (`hit_budget`)."""

from __future__ import annotations

import math

import pytest

from grpo_ext.evaluation.excerpt import excerpt_rows
from grpo_ext.evaluation.scoring import score_problem
from grpo_ext.tasks import get_task
from grpo_ext.tasks.arithmetic import Problem
from grpo_ext.tasks.base import TRUNCATED, truncated_at_cap
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask, word_problem

EOS, PAD = 0, 1
PROBLEM = Problem(operands=(43, 17, 18), operators=("+", "-"))


@pytest.mark.parametrize(
    ("ids", "text", "stops", "cut"),
    [
        ([5, 6, 7, 8], "abcd", (), True),  # the cap, no EOS, no stop string: cut off
        ([5, 6, 7, EOS], "abc", (), False),  # EOS on the last allowed token: finished
        ([5, 6, 7, PAD], "abc", (), False),  # padding counts as an end, as in TRL's mask_truncated_completions
        ([5, 6, 7], "abc", (), False),  # shorter than the cap: it ended before it
        ([5, 6, 7, 8], "ab\nQuestion:", ("Question:",), False),  # the sampler stopped at the stop string, no EOS
        ([5, 6, 7, 8], "ab Question", ("Question:",), True),  # not the stop string
        ([], "", (), False),
    ],
)
def test_truncated_at_cap_by_hand(ids, text, stops, cut):
    assert truncated_at_cap(ids, text, max_length=4, end_ids={EOS, PAD}, stop_strings=stops) is cut


def test_a_cut_off_sample_has_no_answer_in_the_outcome_rewards():
    """The last-number rule would read "Step 5: Determine the" as 5 (the study's farmed "right" samples), and a
    strict "#### 42" before the cap does not make a sample that never stopped a finished one."""
    task = WordArithmeticTask()
    prompt = task.build_prompt(word_problem(Problem(operands=(62, 57), operators=("-",)))[0])
    farmed = "Step 1: Understand the problem.\nStep 4: Create a logical sequence.\nStep 5: Determine the"
    rambled = "62 - 57 = 5\n#### 5\nStep 3: Check the"
    finished = "62 - 57 = 5\n#### 5"
    completions = [farmed, rambled, finished]
    assert task.outcome_reward([prompt] * 3, completions, ["5"] * 3) == [1.0, 1.0, 1.0]  # not told: as before
    told = {TRUNCATED: [True, True, False]}
    assert task.outcome_reward([prompt] * 3, completions, ["5"] * 3, **told) == [0.0, 0.0, 1.0]
    assert task.strict_outcome_reward([prompt] * 3, completions, ["5"] * 3, **told) == [0.0, 0.0, 1.0]
    # every task's outcome reward: the embedded arithmetic's too
    arithmetic = get_task("arithmetic")
    assert arithmetic.outcome_reward(["37+45="], ["37+45=82;#82"], ["82"], **{TRUNCATED: [True]}) == [0.0]
    with pytest.raises(ValueError, match="completion_truncated: 1 flags for 3 completions"):
        task.outcome_reward([prompt] * 3, completions, ["5"] * 3, **{TRUNCATED: [True]})


def test_the_cut_line_of_a_cut_off_sample_gets_no_step_score():
    """ "60 - 18 = 4" is where the cap cut "60 - 18 = 42": not a false step, an unfinished one (NaN); the lines before
    it keep their scores, and a finished sample's last line is scored as any other."""
    task = WordArithmeticTask()
    prompt = task.build_prompt(word_problem(PROBLEM)[0])
    cut = "43 + 17 = 60\n60 - 18 = 4"
    scores = task.step_reward([prompt, prompt], [cut, cut], **{TRUNCATED: [True, False]})
    assert scores[0][0] == 1.0 and math.isnan(scores[0][1])
    assert scores[1] == [1.0, 0.0]  # stopped there, it is a false step


def test_the_harness_gives_a_cut_off_sample_no_answer_where_the_budget_is_known():
    """score_problem and the excerpt with hit_budget: a right-looking cut-off sample is neither right, nor a vote,
    nor in the strict form; unknown budget (None): as before."""
    task = WordArithmeticTask()
    row = task.load("test", 1)[0]
    problem = {"problem_id": "0", "prompt": row["prompt"], "answer": row["answer"], "question": row["question"]}
    right = f"#### {row['answer']}"
    completions = [right, f"{right}\nStep 2: Check the", "Step 1: Think.\nStep 5: Determine the"]
    hit = [False, True, True]
    record = score_problem(task, problem, completions, [1, 3], hit_budget=hit)
    assert record["n_correct"] == 1 and record["n_extracted"] == 1 and record["n_strict"] == 1
    assert record["anatomy"]["right"] == 1 and record["anatomy"]["unfinished"] == 2
    unknown = score_problem(task, problem, completions, [1, 3])
    assert unknown["n_correct"] == 2 and unknown["n_extracted"] == 3
    rows = excerpt_rows(task, problem, completions, hit)
    assert [(r["correct"], r["extracted"], r["strict"], r["kind"]) for r in rows] == [
        (True, row["answer"], row["answer"], "right"),
        (False, None, None, "unfinished"),
    ]
