"""The embedded task: multi-step arithmetic with a checkable reasoning chain.

Prompt ``37+45-18=``, reference solution ``37+45=82;82-18=64;#64``: one step per operation, evaluated left to
right (no operator precedence: the steps say the order), steps separated by ``;`` and a final answer line
``#<answer>``. Every step can be checked, which makes the task a rule-based process reward model for free.

Splits are disjoint by construction: a prompt belongs to the test split iff a salted hash of its text falls in
the test bucket, whatever the seed, so no seed or size ever leaks a test prompt into training. The same rule keeps
the base model's supervised set (split ``sft``) apart from the prompts RL trains on (split ``train``): RL on
problems the base memorised only sharpens answers it already knows, so no run's prompts may come from its SFT set.
"""

from __future__ import annotations

import hashlib
import operator
import random
import re
from dataclasses import dataclass

from datasets import Dataset

from grpo_ext.errors import UserError
from grpo_ext.reasoning_steps import step_texts
from grpo_ext.tasks.base import HarnessDefaults, Task

STEP_SEPARATOR = ";"
ANSWER_PREFIX = "#"
OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul}
SPLITS = ("sft", "train", "validation", "test")

_STEP_RE = re.compile(r"^(-?\d+)([+\-*])(-?\d+)=(-?\d+)$")
_ANSWER_RE = re.compile(r"#(-?\d+)")
_PROMPT_RE = re.compile(r"^(\d+)((?:[+\-*]\d+)+)=$")
_OP_RE = re.compile(r"([+\-*])(\d+)")


@dataclass(frozen=True)
class Problem:
    operands: tuple[int, ...]
    operators: tuple[str, ...]

    @property
    def prompt(self) -> str:
        tail = "".join(f"{op}{x}" for op, x in zip(self.operators, self.operands[1:], strict=True))
        return f"{self.operands[0]}{tail}="

    def partial_results(self) -> list[int]:
        """The result after each operation, left to right."""
        value, results = self.operands[0], []
        for op, x in zip(self.operators, self.operands[1:], strict=True):
            value = OPERATORS[op](value, x)
            results.append(value)
        return results

    @property
    def answer(self) -> int:
        return self.partial_results()[-1]

    @property
    def solution(self) -> str:
        steps, left = [], self.operands[0]
        for op, x, result in zip(self.operators, self.operands[1:], self.partial_results(), strict=True):
            steps.append(f"{left}{op}{x}={result}")
            left = result
        return STEP_SEPARATOR.join([*steps, f"{ANSWER_PREFIX}{result}"])

    def attributes(self) -> dict[str, str]:
        """The slices a report cuts this problem into: ``operation`` (the one operator, or ``mixed``), ``operands``
        (their number) and ``carry_borrow`` (``yes`` when an addition carries or a subtraction borrows in some
        column, ``no`` otherwise; multiplications are not counted)."""
        kinds = set(self.operators)
        left, regroups = self.operands[0], False
        for op, x, result in zip(self.operators, self.operands[1:], self.partial_results(), strict=True):
            regroups = regroups or (op in "+-" and _regroups(left, x, op))
            left = result
        return {
            "operation": kinds.pop() if len(kinds) == 1 else "mixed",
            "operands": str(len(self.operands)),
            "carry_borrow": "yes" if regroups else "no",
        }

    @classmethod
    def from_prompt(cls, prompt: str) -> Problem:
        match = _PROMPT_RE.match(prompt.strip())
        if match is None:
            raise ValueError(f"not an arithmetic prompt: {prompt!r} (expected e.g. '37+45-18=')")
        pairs = _OP_RE.findall(match.group(2))
        return cls(
            operands=(int(match.group(1)), *(int(x) for _, x in pairs)),
            operators=tuple(op for op, _ in pairs),
        )


def _regroups(a: int, b: int, op: str) -> bool:
    """Whether column arithmetic of ``a op b`` carries (``+``) or borrows (``-``) in some column. Signs: a sum of a
    negative and a positive number, or a difference of numbers of unlike sign, is worked as the difference (or sum)
    of their magnitudes, as on paper."""
    if (op == "+") != ((a < 0) == (b < 0)):  # like signs add magnitudes, unlike signs subtract them
        big, small = max(abs(a), abs(b)), min(abs(a), abs(b))
        while small:
            if big % 10 < small % 10:
                return True
            big, small = big // 10, small // 10  # no borrow in this column
        return False
    a, b = abs(a), abs(b)
    while a or b:
        if a % 10 + b % 10 >= 10:
            return True
        a, b = a // 10, b // 10
    return False


def split_of(prompt: str, test_percent: int = 10) -> str:
    """The split a prompt belongs to; fixed by the prompt's text alone (salted SHA-256): ``test_percent`` of the
    prompts are test, as many again validation (where settings are chosen); of the rest, half are the base model's
    supervised set (``sft``) and half the RL prompts (``train``)."""
    bucket = int.from_bytes(hashlib.sha256(f"grpo-ext/arithmetic/{prompt}".encode()).digest()[:8], "big") % 100
    if bucket < test_percent:
        return "test"
    if bucket < 2 * test_percent:
        return "validation"
    return "sft" if bucket < 50 + test_percent else "train"


#: The largest knobs a problem is built with: past them a prompt and its solution outgrow the context of any model this
#: project trains (the embedded model has 128 positions; the real one 8,192 or more), and an operand of more than 4,300
#: digits is more than Python will write as text (building the data set failed with a traceback).
MAX_DIGITS = 100
MAX_OPERANDS = 100


def _bounded(name: str, value: int, low: int, high: int) -> None:
    """A knob in [low, high], else a `UserError` naming it as the config names it (`task_kwargs.<name>`)."""
    if value < low:
        raise UserError(f"arithmetic: {name} must be >= {low}, got {value} (task_kwargs.{name}: {low} to {high})")
    if value > high:
        raise UserError(f"arithmetic: {name} must be <= {high}, got {value} (task_kwargs.{name}: {low} to {high})")


class ArithmeticTask(Task):
    """Multi-step arithmetic. Difficulty knobs: operand count range, digits per operand, operators."""

    name = "arithmetic"
    step_separator = STEP_SEPARATOR
    slice_attributes = ("operation", "operands", "carry_borrow")
    #: 200 problems run in minutes on 2 CPU cores; 48 tokens (characters) hold the default knobs' longest solution (40)
    harness_defaults = HarnessDefaults(limit=200, max_new_tokens=48)

    def __init__(
        self,
        min_operands: int = 2,
        max_operands: int = 4,
        digits: int = 2,
        operators: str = "+-",
        seed: int = 0,
        test_percent: int = 10,
    ):
        if not 2 <= min_operands <= max_operands:
            raise UserError(f"arithmetic: need 2 <= min_operands <= max_operands, got {min_operands}, {max_operands}")
        _bounded("max_operands", max_operands, 2, MAX_OPERANDS)
        _bounded("digits", digits, 1, MAX_DIGITS)
        unknown = set(operators) - set(OPERATORS)
        if not operators or unknown:
            raise UserError(f"arithmetic: operators must be drawn from {''.join(OPERATORS)!r}, got {operators!r}")
        if not 0 < test_percent < 50:
            raise UserError(f"arithmetic: test_percent must be in (0, 50), got {test_percent}")
        self.min_operands, self.max_operands = min_operands, max_operands
        self.digits, self.operators, self.seed, self.test_percent = digits, operators, seed, test_percent

    def problem_space(self) -> int:
        """How many distinct problems the knobs allow, all splits together (a `train_size` above it cannot be drawn:
        `grpo_ext.script_args` refuses it before building)."""
        values, ops = 10**self.digits, len(self.operators)
        return sum(values**k * ops ** (k - 1) for k in range(self.min_operands, self.max_operands + 1))

    # ---- data -------------------------------------------------------------------------------------------
    def problems(self, split: str, n: int, allow_fewer: bool = False) -> list[Problem]:
        """`n` distinct problems of `split`, the same list for the same seed and knobs (``allow_fewer``: as many as
        the knobs' problem space holds, up to `n`, instead of an error)."""
        if split not in SPLITS:
            raise ValueError(f"arithmetic: unknown split {split!r}; expected one of {SPLITS}")
        rng = random.Random(f"{self.seed}/{split}")
        high = 10**self.digits - 1
        seen: set[str] = set()
        out: list[Problem] = []
        for _ in range(200 * n + 10_000):  # bounded: a tiny problem space cannot loop forever
            if len(out) == n:
                break
            k = rng.randint(self.min_operands, self.max_operands)
            problem = Problem(
                operands=tuple(rng.randint(0, high) for _ in range(k)),
                operators=tuple(rng.choice(self.operators) for _ in range(k - 1)),
            )
            prompt = problem.prompt
            if prompt in seen or split_of(prompt, self.test_percent) != split:
                continue
            seen.add(prompt)
            out.append(problem)
        if len(out) < n and not allow_fewer:
            raise UserError(f"arithmetic: only {len(out)} distinct {split} problems exist for these knobs, asked {n}")
        return out

    def load(self, split: str, n: int | None = None) -> Dataset:
        n = n if n is not None else (20_000 if split in ("sft", "train") else 500)
        problems = self.problems(split, n)
        return Dataset.from_dict(
            {
                "prompt": [p.prompt for p in problems],
                "answer": [str(p.answer) for p in problems],
                "solution": [p.solution for p in problems],
            }
        )

    # ---- verifiers --------------------------------------------------------------------------------------
    def extract_answer(self, completion: str) -> str | None:
        """The integer on the first answer line (``#64``), normalised (``#064`` -> ``64``), else None."""
        match = _ANSWER_RE.search(completion)
        return str(int(match.group(1))) if match else None

    def normalize_answer(self, answer: str) -> str:
        return str(int(answer))

    def problem_attributes(self, row) -> dict[str, str]:
        """:meth:`Problem.attributes` of the row's prompt."""
        return Problem.from_prompt(row["prompt"]).attributes()

    def verify_steps(self, prompt: str, completion: str) -> list[float]:
        """One score per step of the completion (1.0 right, 0.0 wrong), steps split on ``;``.

        An operation step ``a op b = c`` is right when it is the problem's next operation (same operator and
        right operand), its left operand ``a`` is the previous step's stated result (the first operand for the
        first step), and ``c`` is ``a op b``. The answer line ``#x`` is right when ``x`` is the problem's answer
        and it comes right after the last operation. Anything else (garbage, extra steps) scores 0.
        """
        problem = Problem.from_prompt(prompt)
        segments = step_texts(completion, STEP_SEPARATOR)  # the trainer's segmentation, so the counts agree
        scores: list[float] = []
        left, n_ops, answered = problem.operands[0], len(problem.operators), False
        for i, segment in enumerate(segments):
            segment = segment.strip()
            ok = False
            if (step := _STEP_RE.match(segment)) is not None:
                a, op, b, c = int(step.group(1)), step.group(2), int(step.group(3)), int(step.group(4))
                ok = (
                    not answered
                    and i < n_ops
                    and op == problem.operators[i]
                    and b == problem.operands[i + 1]
                    and a == left
                    and c == OPERATORS[op](a, b)
                )
                left = c
            elif segment.startswith(ANSWER_PREFIX):
                value = segment[len(ANSWER_PREFIX) :]
                ok = not answered and i == n_ops and re.fullmatch(r"-?\d+", value) is not None
                ok = ok and int(value) == problem.answer
                answered = True
            scores.append(float(ok))
        return scores
