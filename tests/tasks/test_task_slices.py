"""Tasks declare what a report is sliced by, their strict answer form and their stop strings (hand-worked cases)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from grpo_ext.errors import UserError
from grpo_ext.rewards import resolve_reward_funcs
from grpo_ext.tasks import get_task
from grpo_ext.tasks.arithmetic import Problem, _regroups


@pytest.mark.parametrize(
    ("a", "b", "op", "expected"),
    [
        (34, 22, "+", False),  # 4+2, 3+2
        (35, 27, "+", True),  # 5+7 carries
        (99, 1, "+", True),
        (34, 22, "-", False),  # 4-2, 3-2
        (31, 17, "-", True),  # 1-7 borrows
        (100, 1, "-", True),
        (5, 30, "-", True),  # worked as -(30 - 5): 0 - 5 borrows
        (-5, 7, "+", False),  # worked as 7 - 5
    ],
)
def test_carry_and_borrow_by_hand(a, b, op, expected):
    assert _regroups(a, b, op) is expected


def test_arithmetic_problem_attributes():
    assert Problem((37, 45, 18), ("+", "-")).attributes() == {
        "operation": "mixed",
        "operands": "3",
        "carry_borrow": "yes",  # 7+5 carries
    }
    assert Problem((34, 22), ("-",)).attributes() == {"operation": "-", "operands": "2", "carry_borrow": "no"}
    task = get_task("arithmetic")
    assert task.problem_attributes({"prompt": "31-17=", "answer": "14"})["carry_borrow"] == "yes"
    assert set(task.slice_attributes) == {"operation", "operands", "carry_borrow"}


def test_word_arithmetic_attributes_read_from_the_question():
    task = get_task("word_arithmetic", num_fewshot=1)
    row = task.load("test", 3)[0]
    attributes = task.problem_attributes(row)
    assert set(attributes) == set(task.slice_attributes)
    chat_only = {"prompt": [{"role": "user", "content": "Question: Leo has 34 apples. Then Leo sells 22 apples."}]}
    assert task.problem_attributes(chat_only) == {"operation": "-", "operands": "2", "carry_borrow": "no"}


def test_balance_operations_gives_equal_shares_and_shows_each_operation():
    plain = get_task("word_arithmetic")
    shares = Counter(plain.problem_attributes(r)["operation"] for r in plain.load("test", 500))
    assert shares["+"] > 1.5 * shares["-"]  # the shipped draw: the skew the knob removes
    task = get_task("word_arithmetic", balance_operations=True, num_fewshot=2)
    for split in ("train", "validation", "test"):
        shares = Counter(task.problem_attributes(r)["operation"] for r in task.load(split, 300))
        assert shares == {"+": 150, "-": 150}
    prompt = task.load("test", 1)[0]["prompt"][0]["content"]
    worked = prompt.split("Question:")[1:-1]  # the two worked examples
    assert len(worked) == 2 and " + " in worked[0] and " - " in worked[1]
    # the examples are left out of train, and a longer draw starts with the same problems
    train = task.load("train", 200)["question"]
    assert not any(example.split("\nAnswer:")[0].strip() in train for example in worked)
    assert task.load("test", 50)["question"] == task.load("test", 100)["question"][:50]
    three = get_task("word_arithmetic", balance_operations=True, min_operands=3, max_operands=3)
    assert Counter(tuple(p.operators) for p in three.problems("validation", 80)) == {
        ("+", "+"): 20,
        ("+", "-"): 20,
        ("-", "+"): 20,
        ("-", "-"): 20,
    }
    with pytest.raises(UserError, match="balance_operations"):
        get_task("word_arithmetic", balance_operations="yes")


@pytest.mark.parametrize(
    ("completion", "lenient", "strict"),
    [
        ("34 + 22 = 56\n#### 56", "56", "56"),
        ("34 + 22 = 56", "56", None),  # a right-looking number, not in the form
        ("so \\boxed{12}", "12", "12"),
        ("#### 7 and then 9", "7", "7"),
        ("no number", None, None),
    ],
)
def test_gsm8k_strict_and_lenient_answers(completion, lenient, strict):
    task = get_task("word_arithmetic")
    assert task.extract_answer(completion) == lenient
    assert task.extract_strict_answer(completion) == strict


def test_strict_outcome_reward_requires_the_form():
    task = get_task("word_arithmetic")
    completions = ["34 - 22 = 12\n#### 12", "34 - 22 = 12", "#### 56"]
    answers = ["12", "12", "12"]
    assert task.outcome_reward(prompts=[""] * 3, completions=completions, answer=answers) == [1.0, 1.0, 0.0]
    (strict,) = resolve_reward_funcs(["outcome_strict"], task)
    assert strict(prompts=[""] * 3, completions=completions, answer=answers) == [1.0, 0.0, 0.0]
    # the embedded task's only form is its strict one
    arithmetic = get_task("arithmetic")
    assert arithmetic.extract_strict_answer("1+2=3;#3") == arithmetic.extract_answer("1+2=3;#3") == "3"


def test_stop_strings_declared():
    assert get_task("word_arithmetic").stop_strings == ("Question:",)
    assert get_task("math").stop_strings == ("Problem:",)
    assert get_task("arithmetic").stop_strings == ()


def test_math_slices_are_its_columns():
    task = get_task("math", data_files="tests/fixtures/math_sample.jsonl")
    data = task.load("test")
    attributes = [task.problem_attributes(row) for row in data]
    assert all(a["level"].startswith("Level ") and a["type"] for a in attributes)
    assert [a["level"] for a in attributes] == data["level"]


def test_jsonl_attribute_fields(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [{"question": "1+1?", "answer": "2", "source": "a"}, {"question": "2+2?", "answer": "4", "source": "b"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task("jsonl", path=str(path), attribute_fields=["source"])
    data = task.load("test")
    assert task.slice_attributes == ("source",)
    assert [task.problem_attributes(r) for r in data] == [{"source": "a"}, {"source": "b"}]
    path.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    with pytest.raises(UserError, match="line 1: no 'source' field"):
        task.load("test")
    with pytest.raises(UserError, match="attribute_fields"):
        get_task("jsonl", path=str(path), attribute_fields="source")
