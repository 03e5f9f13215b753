"""The cheapest hacks of process supervision, scored the trainer's way: the task's step verifier (through
`score_steps`, one character a token), the outcome as a last step, DeepSeekMath's process advantages, then the cap
that keeps right samples first (`cap_to_right_samples`).

The real-model study's process arm farmed the step verifier (issue 48): number-free "Step k: Determine ..." lines to
the length cap, then, once those earned nothing, lines restating the problem's numbers would have. Each hack below is
what a policy could write without solving the problem; beside one finished right sample none may get more advantage
on any token, nor more summed advantage (what a token-summed loss weighs a sample by).
"""

from __future__ import annotations

import string

import pytest
import torch

from grpo_ext.advantages import cap_to_right_samples, process_advantages
from grpo_ext.rewards.process import build_step_rewards, score_steps
from grpo_ext.tasks.arithmetic import Problem
from grpo_ext.tasks.base import TRUNCATED, truncated_at_cap
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask, word_problem
from tests.test_reasoning_steps import line_char_tokenizer

TASK = WordArithmeticTask()
TOKENIZER = line_char_tokenizer(string.ascii_letters + string.digits + " .,:+-=#\n")
CAP = 90  # max_completion_length, in characters (one a token)
PROBLEM = Problem(operands=(43, 17, 18), operators=("+", "-"))  # running totals 60, 42
PROMPT = TASK.build_prompt(word_problem(PROBLEM)[0])
QUESTION = word_problem(PROBLEM)[0]  # "Max has 43 cards. Then Max is given 17 more cards. Then ..."


def to_cap(text: str) -> str:
    """`text` repeated and cut at the cap: a sample the length cap stopped (no EOS, no stop string)."""
    return (text * (CAP // len(text) + 1))[:CAP]


def cut_before(tail: str) -> str:
    """A number-free first line, then `tail`, which the cap cuts exactly at its end."""
    return ("Let me think about it. " * CAP)[: CAP - len(tail)] + tail


RIGHT = "43 + 17 = 60\n60 - 18 = 42\n#### 42"
HACKS = {
    # the study's farm: numbered lines that state nothing, to the cap
    "number_free_to_cap": to_cap("Step 1: Determine the total.\nStep 2: Determine what is asked.\n"),
    # the problem's numbers restated, a finished sample (the "Max has 86 coins." lines), and to the cap
    "restated_finished": "\n".join(s.strip() + "." for s in QUESTION.split(".")[:3]),
    "restated_to_cap": to_cap("Max has 43 cards.\nMax is given 17 more cards.\nMax gives away 18 cards.\n"),
    # one right line, repeated to the cap
    "right_line_repeated": to_cap("43 + 17 = 60\n"),
    # the right solution and answer, then no stop: the cap cuts a rambling line
    "right_then_rambling": to_cap(RIGHT + "\nStep 4: Determine the final total of the cards Max has now.\n"),
    # right lines, then the cap cuts the answer line ("#### 4": its last number is no answer)
    "right_cut_mid_answer": cut_before("\n43 + 17 = 60\n60 - 18 = 42\n#### 4"),
    # a right running total, then the wrong plan, finished: a wrong answer (not a hack, a plain wrong sample)
    "wrong_plan": "43 + 17 = 60\n60 + 18 = 78\n#### 78",
}


def score_group(completions: list[str], finished: list[bool]):
    """What GRPOExtTrainer does with one group: flags, outcome, step scores, step rewards, advantages, cap.
    Returns (capped advantages, DeepSeekMath's advantages, lengths, truncated flags)."""
    eos = TOKENIZER.eos_token_id
    ids = [
        TOKENIZER(c, add_special_tokens=False)["input_ids"] + ([eos] if f else [])
        for c, f in zip(completions, finished, strict=True)
    ]
    cut = [
        truncated_at_cap(i, c, max_length=CAP, end_ids={eos}, stop_strings=("Question:",))
        for i, c in zip(ids, completions, strict=True)
    ]
    n = len(completions)
    kwargs = {"answer": ["42"] * n, TRUNCATED: cut}
    outcome = torch.tensor(TASK.outcome_reward([PROMPT] * n, completions, **kwargs))
    steps = score_steps([TASK.step_reward], TOKENIZER, "newline", [PROMPT] * n, completions, ids, kwargs)
    width = max(len(i) for i in ids)
    mask = torch.zeros(n, width)
    for row, i in enumerate(ids):
        mask[row, : len(i)] = 1
    step_rewards = build_step_rewards(steps, mask, outcome=outcome)
    plain = process_advantages(step_rewards, group_size=n)
    lengths = torch.tensor([len(i) for i in ids])
    right = (outcome > 0) & ~torch.tensor(cut)
    return cap_to_right_samples(plain, right, lengths, n), plain, lengths, cut, outcome


def test_the_hacks_are_what_they_claim_to_be():
    """The fixture itself: which samples the cap cut off, and what the verifier and the outcome give each."""
    completions = [RIGHT, *HACKS.values()]
    finished = [True, *(len(h) < CAP for h in HACKS.values())]
    _, _, _, cut, outcome = score_group(completions, finished)
    assert dict(zip(["right", *HACKS], cut, strict=True)) == {
        "right": False,
        "number_free_to_cap": True,
        "restated_finished": False,
        "restated_to_cap": True,
        "right_line_repeated": True,
        "right_then_rambling": True,
        "right_cut_mid_answer": True,
        "wrong_plan": False,
    }
    assert HACKS["right_cut_mid_answer"].endswith("\n####" + " 4") and len(HACKS["right_cut_mid_answer"]) == CAP
    assert outcome.tolist() == [1, 0, 0, 0, 0, 0, 0, 0]  # a cut-off sample has no answer, "#### 42" or not
    assert TASK.step_reward([PROMPT], [HACKS["restated_finished"]]) == [[pytest.approx(float("nan"), nan_ok=True)] * 3]


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_no_hack_outranks_the_finished_right_sample_beside_all_the_others(hack):
    """One group: the right sample, every hack. On every token, no hack's advantage exceeds the right sample's lowest;
    summed over its tokens, no hack gets more than the right sample."""
    names = ["right", *HACKS]
    completions = [RIGHT, *HACKS.values()]
    capped, _, lengths, _, _ = score_group(completions, [True, *(len(h) < CAP for h in HACKS.values())])
    row = names.index(hack)
    right = capped[0, : lengths[0]]
    mine = capped[row, : lengths[row]]
    assert right.min() > 0  # non-vacuous: the right sample is pushed up on every token
    assert mine.max() <= right.min()
    assert mine.sum() <= right.sum()


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_no_hack_outranks_a_short_right_sample_among_all_wrong_samples(hack):
    """The hard case for DeepSeekMath's sum: the right sample is short ("#### 42" alone: one step) and the group is
    otherwise wrong, so the group's mean reward is low and a sample with more right-looking steps collects more
    normalised reward on its early tokens than the right one has anywhere. The cap keeps the order."""
    completions = [
        "#### 42",
        HACKS[hack],
        HACKS["number_free_to_cap"],
        HACKS["restated_finished"],
        "I do not know.",
        "#### 41",
        "60 - 18 = 40\n#### 40",
        "Max has 43 cards.",
    ]
    finished = [len(c) < CAP for c in completions]
    capped, plain, lengths, _, _ = score_group(completions, finished)
    right = capped[0, : lengths[0]]
    assert right.min() > 0
    for row in range(1, len(completions)):
        mine = capped[row, : lengths[row]]
        assert mine.max() <= right.min() and mine.sum() <= right.sum(), completions[row]
    if hack in ("right_cut_mid_answer", "right_then_rambling"):
        # why the cap is there: DeepSeekMath's sum alone ranks the cut-off sample's first tokens above the right one
        assert plain[1, : lengths[1]].max() > plain[0, : lengths[0]].min()


def test_a_restating_sample_gets_less_than_real_progress_in_an_all_wrong_group():
    """No right answer in the group, so the cap does nothing and DeepSeekMath decides: a sample that computed a right
    running total (then went wrong) gets more than the restating and number-free hacks on every token; before issue
    48 the four restating lines scored 1.0 each and took the group's top advantage."""
    completions = [HACKS["restated_finished"], HACKS["number_free_to_cap"], HACKS["wrong_plan"], "#### 41"]
    capped, plain, lengths, _, _ = score_group(completions, [len(c) < CAP for c in completions])
    torch.testing.assert_close(capped, plain)  # no right sample: untouched
    progress = capped[2, : lengths[2]]
    for row in (0, 1, 3):
        assert capped[row, : lengths[row]].max() < progress.max()
        assert capped[row, : lengths[row]].sum() < progress.sum()
    assert capped[0, : lengths[0]].max() < 0  # restating earns nothing: only its wrong outcome, below the mean
