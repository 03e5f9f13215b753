"""The failure anatomy: format (truncated, no answer) against content (wrong arithmetic, wrong with right steps)."""

from __future__ import annotations

import pytest

from grpo_ext.evaluation.failures import anatomy, anatomy_markdown, failure_kind, has_marked_answer
from grpo_ext.tasks.arithmetic import Problem
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask, word_problem

TASK = WordArithmeticTask()
PROMPT = [{"role": "user", "content": TASK.build_prompt(word_problem(Problem((43, 17, 18), ("+", "-")))[0])}]


@pytest.mark.parametrize(
    ("completion", "n_tokens", "kind"),
    [
        ("43 + 17 = 60\n60 - 18 = 42\n#### 42", 20, "right"),
        ("43 + 17 = 60\n60 - 18 = 42\nThe answer is 42", 20, "right"),  # the last number, as GSM8K reads it
        ("43 + 17 = 60\n60 - 18 = 42\n#### 42", 64, "right"),  # right at the budget is still right
        ("43 + 17 = 60\n60 - 18 =", 64, "truncated"),
        ("Let me think about the apples.", 10, "no_answer"),
        ("43 + 17 = 61\n61 - 18 = 43\n#### 43", 20, "wrong_arithmetic"),
        ("43 + 17 = 60\n#### 60", 20, "wrong_other"),  # every step true, one operation left out
        ("So \\boxed{41}", 5, "wrong_other"),
    ],
)
def test_failure_kinds_by_hand(completion, n_tokens, kind):
    assert failure_kind(TASK, PROMPT, completion, "42", n_tokens, 64) == kind


def test_anatomy_counts_shares_and_the_format_share():
    a = anatomy(["right", "truncated", "no_answer", "no_answer", "wrong_arithmetic"])
    assert a["counts"] == {"right": 1, "truncated": 1, "no_answer": 2, "wrong_arithmetic": 1, "wrong_other": 0}
    assert a["shares"]["no_answer"] == 0.4 and a["format_share_of_failures"] == 0.75
    assert anatomy_markdown({"base": a})[-1] == "| base | 5 | 0.200 | 0.200 | 0.400 | 0.200 | 0.000 | 0.750 |"
    assert has_marked_answer("#### 7") and has_marked_answer("\\boxed{x}") and not has_marked_answer("#### ANSWER")
