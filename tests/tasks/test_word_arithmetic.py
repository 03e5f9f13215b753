"""The word-problem task: the embedded arithmetic told as GSM8K rows, loaded the GSM8K way, checked step by step."""

from __future__ import annotations

import json

import pytest
import torch

from grpo_ext.errors import UserError
from grpo_ext.rewards.process import ScoredSteps, build_step_rewards
from grpo_ext.tasks import get_task
from grpo_ext.tasks.arithmetic import Problem, split_of
from grpo_ext.tasks.gsm8k import GSM8KTask
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask, problem_from_question, word_problem

PROBLEM = Problem(operands=(43, 17, 18), operators=("+", "-"))
NAN = float("nan")


def test_a_problem_is_told_and_solved_in_gsm8k_layout_and_read_back():
    question, solution = word_problem(PROBLEM)
    name = question.split()[0]
    item = question.split()[3].rstrip(".")
    assert question.startswith(f"{name} has 43 {item}. Then {name} ")
    assert question.endswith(f" 18 {item}. How many {item} does {name} have now?")
    assert solution == "43 + 17 = <<43+17=60>>60\n60 - 18 = <<60-18=42>>42\n#### 42"
    assert problem_from_question(question) == PROBLEM
    assert problem_from_question(f"Instruction.\n\nQuestion: {question}\nAnswer:") == PROBLEM
    with pytest.raises(ValueError, match="not a word problem"):
        problem_from_question("What is 2 + 2?")


def test_splits_are_disjoint_deterministic_and_never_negative():
    task = WordArithmeticTask(min_operands=2, max_operands=3)
    problems = {split: task.problems(split, 300) for split in ("train", "validation", "test")}
    for split, rows in problems.items():
        assert all(split_of(p.prompt) == split for p in rows)  # the arithmetic task's own split rule
        assert all(min(p.partial_results()) >= 0 for p in rows)
        assert {len(p.operands) for p in rows} == {2, 3}
    train, val, test = ({p.prompt for p in rows} for rows in problems.values())
    assert not (train & val or train & test or val & test)
    assert task.problems("test", 300) == problems["test"]  # deterministic
    assert task.problems("test", 50) == problems["test"][:50]  # a prefix of a longer draw
    questions = [word_problem(p)[0] for p in problems["test"]]
    assert [problem_from_question(q) for q in questions] == problems["test"]


def test_the_gsm8k_loader_reads_its_rows_into_the_same_prompts(tmp_path):
    """Written as openai/gsm8k JSONL files and loaded by GSM8KTask: the same prompts, answers and questions."""
    task = get_task("word_arithmetic", max_operands=3)
    files = {}
    for split in ("train", "test"):
        files[split] = tmp_path / f"{split}.jsonl"
        files[split].write_text("".join(json.dumps(r) + "\n" for r in task.gsm8k_rows(split, 20)))
    gsm8k = GSM8KTask(data_files={k: str(v) for k, v in files.items()}, conversational=True)
    ours, theirs = task.load("test", 20), gsm8k.load("test")
    assert ours["prompt"] == theirs["prompt"] and ours["answer"] == theirs["answer"]
    assert ours["question"] == theirs["question"]
    prompt = ours["prompt"][0]
    assert prompt[0]["role"] == "user" and prompt[0]["content"].endswith(f"Question: {ours['question'][0]}\nAnswer:")
    assert "write each step on its own line" in prompt[0]["content"]


def test_few_shot_examples_come_from_train_and_leave_it():
    task = WordArithmeticTask(num_fewshot=2)
    text = task.load("test", 1)["prompt"][0][0]["content"]
    assert text.count("Question:") == 3 and "<<" not in text  # calculator annotations stripped, as GSM8K's
    shown = {line.removeprefix("Question: ") for line in text.splitlines() if line.startswith("Question:")}
    pool = {row["question"] for row in task.gsm8k_rows("train", 100)}
    examples = shown & pool
    assert len(examples) == 2 and not examples & set(task.load("train", 200)["question"])  # left out of train
    assert len(task.load("train", 200)) == 200
    with pytest.raises(UserError, match="num_fewshot must be <= 100"):
        WordArithmeticTask(num_fewshot=101).load("test", 1)


@pytest.mark.parametrize(
    ("completion", "scores"),
    [
        ("43 + 17 = 60\n60 - 18 = 42\n#### 42", [1, 1, 1]),
        ("43 + 17 = 61\n61 - 18 = 43\n#### 43", [0, 0, 0]),  # a true equation on a wrong number is still wrong
        ("First, 43 + 17 = 60 apples.\nThen she has 60 - 18 = 42.\nSo the answer is \\boxed{42}", [1, 1, 1]),
        ("Step 1: 43 + 17 = 60\nStep 2: 60 - 18 = 41\n#### 41", [1, 0, 0]),
        # a chain, left to right; a blank line opens no step; a line without a number has nothing to check (NaN)
        ("Let's think.\n\n43 + 17 - 18 = 42\n#### 42", [NAN, 1, 1]),
        ("She had 43 and got 17, so 59.\n#### 42", [0, 1]),  # 59 is no number of the problem
        ("43 + 17 = 60\n60 - 18 = 42", [1, 1]),
        # the real-model study's reward hack: numbered lines that state nothing were a free 1.0 each
        ("Step 1: Identify the problem\nStep 2: Set up the equation\n#### 41", [NAN, NAN, 0]),
        ("#### many", [0]),  # an answer line without a number is a wrong answer, not an unchecked step
        ("", []),
        # issue 48: only a new right running total earns, once. Restating the problem earns nothing ...
        ("Max has 43 cards.\nThen Max is given 17 more cards.\nThen Max gives away 18 cards.", [NAN, NAN, NAN]),
        # ... nor does a repeated line (numbering and spacing aside), a total computed again, a repeated answer
        ("43 + 17 = 60\n43 + 17 = 60\nStep 3:  43 + 17 = 60", [1, NAN, NAN]),
        ("43 + 17 = 60\nSo 43+17 = 60 cards.\n60 - 18 = 42\n#### 42\n#### 42", [1, NAN, 1, 1, NAN]),
        # true equations that are no step of this solution: checkable, nothing to earn (else "43 + 43 = 86", "86 +
        # 43 = 129", ... would pay without end)
        ("43 + 43 = 86\n86 + 43 = 129\n17 + 18 = 35", [NAN, NAN, NAN]),
        ("43 - 18 = 25\n25 + 17 = 42\n#### 42", [NAN, 1, 1]),  # another order: its total counts, its detour does not
        ("Max has 60 cards now.\n#### 42", [NAN, 1]),  # a bare running total: no equation, no credit, not wrong
        ("#### 41\n#### 42", [0, 1]),
        ("60 - 18 = 42\n#### 42", [1, 1]),  # 60 is a right running total, stated or not
    ],
)
def test_the_step_verifier_by_hand(completion, scores):
    task = WordArithmeticTask()
    prompt = task.build_prompt(word_problem(PROBLEM)[0])
    assert task.verify_steps(prompt, completion) == pytest.approx(scores, nan_ok=True)


def test_a_line_without_a_number_earns_no_process_reward():
    """The verifier's NaN is a missing step score where process supervision places rewards: a number-free line (the
    study's reward hack) gets nothing, a worked solution's lines get theirs. Step ends at tokens 2, 5, 7 of 8."""
    task = WordArithmeticTask()
    prompt = task.build_prompt(word_problem(PROBLEM)[0])
    hack = "Step 1: Identify the problem\nStep 2: Set up the equation\n#### 41"
    worked = "43 + 17 = 60\n60 - 18 = 42\n#### 42"
    steps = [ScoredSteps([2, 5, 7], task.verify_steps(prompt, c), 8) for c in (hack, worked)]
    rewards = build_step_rewards(steps, torch.ones(2, 8))
    assert torch.isnan(rewards[0, [2, 5]]).all() and rewards[0, 7].item() == 0.0  # its wrong answer only
    assert rewards[1, [2, 5, 7]].tolist() == [1.0, 1.0, 1.0]
    assert torch.isnan(rewards[:, [0, 1, 3, 4, 6]]).all()  # nothing between step ends


def test_outcome_reward_reads_the_gsm8k_answer_and_the_registry_names_knobs():
    task = get_task("word_arithmetic")
    row = task.load("validation", 1)[0]
    right = f"x\n#### {row['answer']}"
    got = task.outcome_reward(
        [row["prompt"]] * 3, [right, f"\\boxed{{{row['answer']}}}", "#### 1000"], [row["answer"]] * 3
    )
    assert got == [1.0, 1.0, 0.0]
    assert task.step_reward([row["prompt"]], [[{"role": "assistant", "content": right}]])[0][-1] == 1.0
    with pytest.raises(UserError, match="word_arithmetic.*colour"):
        get_task("word_arithmetic", colour=1)
    with pytest.raises(UserError, match="min_operands"):
        get_task("word_arithmetic", min_operands=1)


def test_a_small_problem_space_gives_what_it_holds_and_no_more():
    """2 operands of 2 digits: 20,000 arithmetic problems, about 8,000 in split train and three in four with counts
    that stay >= 0: the default 5,000 load; 7,000 is more than exist (a clear error, not a draw that never ends)."""
    task = get_task("word_arithmetic", min_operands=2, max_operands=2, digits=2, num_fewshot=1)
    assert len(task.load("train")) == 5000
    with pytest.raises(UserError, match="fewer than 7000 train problems with non-negative counts"):
        task.problems("train", 7000)
