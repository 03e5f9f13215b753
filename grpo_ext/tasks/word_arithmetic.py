"""Arithmetic word problems in GSM8K's format, from the embedded arithmetic task's generator.

Each problem is an embedded arithmetic problem (``43+17-18=``, operands and operators from
:class:`grpo_ext.tasks.arithmetic.ArithmeticTask`, so the train / validation / test splits are disjoint by the same
salted hash of the arithmetic) told as a story:

    Question: Mia has 43 apples. Then Mia buys 17 more apples. Then Mia gives away 18 apples. How many apples does
    Mia have now?

and solved in GSM8K's layout (one step a line, calculator annotations, a ``#### answer`` line)::

    43 + 17 = <<43+17=60>>60
    60 - 18 = <<60-18=42>>42
    #### 42

Rows come out as ``openai/gsm8k`` rows (:meth:`WordArithmeticTask.gsm8k_rows`) and become prompts exactly as
:class:`grpo_ext.tasks.gsm8k.GSM8KTask` makes them (its instruction, ``Question: ... Answer:``, a chat message by
default, ``newline`` steps, answers read after ``####`` or in ``\\boxed{}``). Only problems whose running count never
goes below zero are kept (a story cannot give away more apples than there are).

The step verifier (:meth:`WordArithmeticTask.verify_steps`) reads free text, one line a step, and pays only for
progress it can check, each piece of progress once:

- a line is **wrong** (0.0) when one of its equations (``a + b - c = d``, left to right) is false, or when it states a
  number that is none of the problem's operands, right running totals, or results of true equations of this line or an
  earlier one ("so 59" where nothing gives 59);
- a line is **right** (1.0) when, besides, one of its true equations computes a right running total (left to right,
  the answer included) that the problem does not state (not one of its operands) and no earlier line has already
  computed;
- any other line earns **nothing** (NaN: no reward in process supervision,
  :func:`grpo_ext.rewards.process.build_step_rewards`; no label in a process RM's data; neither right nor wrong in
  the failure anatomy): a line without a number ("Step 2: Determine the total."), a line restating the problem ("Max
  has 86 coins."), a bare number without an equation, a true equation whose result is not a running total of this
  problem ("86 + 86 = 172": true, checkable, no step of the solution; an alternative order's intermediate count
  too), a running total computed again, and a repeated line (the same text, ``Step k:`` numbering and spacing aside);
- an **answer line** (``#### n`` or ``\\boxed{n}``) is right when ``n`` is the answer, the first time (a repeated right
  answer earns nothing), and wrong otherwise.

So a sample's step credit is bounded by the problem (one point per running total and one for the answer), whatever
its length. History: number-free lines scored 1.0 until the real-model study (a policy under process supervision
wrote "Step k: Determine ..." lines to the length cap, each a free 1.0); then lines restating the problem's numbers and
repeated lines still scored 1.0 each (issue 48). Whether a sample was cut off at the length cap is not the
verifier's business: :meth:`grpo_ext.tasks.base.Task.step_reward` drops the cut line's score and the outcome reward
gives a cut-off sample no answer.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import re

from datasets import Dataset

from grpo_ext.errors import UserError
from grpo_ext.reasoning_steps import step_texts
from grpo_ext.tasks.arithmetic import ArithmeticTask, Problem
from grpo_ext.tasks.base import HarnessDefaults, completion_text
from grpo_ext.tasks.data import as_prompt
from grpo_ext.tasks.gsm8k import GSM8KTask, extract_gsm8k_strict_answer, gsm8k_reference_number

NAMES = ("Mia", "Leo", "Ava", "Sam", "Zoe", "Ben", "Ivy", "Max")
ITEMS = ("apples", "stickers", "marbles", "coins", "books", "shells", "pencils", "cards")
#: Phrases of one operation; the operator is read back from the phrase (:func:`problem_from_question`).
PHRASES = {
    "+": ("buys {x} more {item}", "finds {x} more {item}", "is given {x} more {item}"),
    "-": ("gives away {x} {item}", "sells {x} {item}", "loses {x} {item}"),
}
_VERBS = {phrase.split(" {x}")[0]: op for op, phrases in PHRASES.items() for phrase in phrases}
_OPERATION_RE = re.compile(r"\bThen \w+ (" + "|".join(map(re.escape, _VERBS)) + r") (\d+)\b")
_START_RE = re.compile(r"\b[A-Z]\w* has (\d+) ")
_EQUATION_RE = re.compile(r"(\d+(?:\.\d+)?(?:\s*[+\-]\s*\d+(?:\.\d+)?)+)\s*=\s*(-?\d+(?:\.\d+)?)")
_NUMBER_RE = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)?")
_MARKER_RE = re.compile(r"^\s*(?:Step\s*\d+\s*:|\d+[.)]\s)")  # "Step 2:" / "2. " numbering is not a claim
FEWSHOT_POOL = 100  # few-shot examples come from the first this many train problems
SPLIT_SIZES = {"train": 5000, "validation": 500, "test": 500}


def _in_turn(items: list, sequences: list[tuple[str, ...]], n: int) -> list:
    """At most `n` of `items` (problems, or ``(problem, tag)`` pairs), one of each operator sequence of `sequences`
    in turn, each sequence's problems in their order. Stops short of `n` once a sequence runs out, so the shares stay
    equal (and a longer list of items gives the same first picks)."""
    by_ops: dict[tuple, list] = {ops: [] for ops in sequences}
    for item in items:
        problem = item[0] if isinstance(item, tuple) else item
        by_ops[problem.operators].append(item)
    out = []
    for i in range(n):
        queue = by_ops[sequences[i % len(sequences)]]
        if i // len(sequences) >= len(queue):
            break
        out.append(queue[i // len(sequences)])
    return out


def _pick(options: tuple, key: str, salt: str) -> str:
    digest = hashlib.sha256(f"grpo-ext/word_arithmetic/{salt}/{key}".encode()).digest()
    return options[int.from_bytes(digest[:4], "big") % len(options)]


def word_problem(problem: Problem) -> tuple[str, str]:
    """``(question, solution)`` of an arithmetic problem in GSM8K's format; the wording depends on the problem only."""
    key = problem.prompt
    name, item = _pick(NAMES, key, "name"), _pick(ITEMS, key, "item")
    sentences = [f"{name} has {problem.operands[0]} {item}."]
    lines, left = [], problem.operands[0]
    for i, (op, x, result) in enumerate(
        zip(problem.operators, problem.operands[1:], problem.partial_results(), strict=True)
    ):
        phrase = _pick(PHRASES[op], key, f"phrase{i}")
        sentences.append(f"Then {name} {phrase.format(x=x, item=item)}.")
        lines.append(f"{left} {op} {x} = <<{left}{op}{x}={result}>>{result}")
        left = result
    sentences.append(f"How many {item} does {name} have now?")
    return " ".join(sentences), "\n".join([*lines, f"#### {problem.answer}"])


def problem_from_question(text: str) -> Problem:
    """The arithmetic problem told by a question (or a prompt holding one: its last ``Question:`` is read)."""
    question = text.rsplit("Question:", 1)[-1]
    start = _START_RE.search(question)
    operations = _OPERATION_RE.findall(question)
    if start is None or not operations:
        raise ValueError(f"word_arithmetic: not a word problem of this task: {text[-200:]!r}")
    return Problem(
        operands=(int(start.group(1)), *(int(x) for _, x in operations)),
        operators=tuple(_VERBS[verb] for verb, _ in operations),
    )


def _evaluate(expression: str) -> float:
    tokens = re.findall(r"[+\-]|\d+(?:\.\d+)?", expression)
    value = float(tokens[0])
    for op, x in zip(tokens[1::2], tokens[2::2], strict=True):
        value = value + float(x) if op == "+" else value - float(x)
    return value


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _answer_value(stated: str | None) -> float | None:
    """An answer line's number (None: no number there, ``\\boxed{many}``)."""
    try:
        return None if stated is None else float(stated)
    except ValueError:
        return None


def _line_key(line: str) -> str:
    """What makes two lines the same line: the text without ``Step k:`` numbering, spacing and case."""
    return " ".join(_MARKER_RE.sub("", line).split()).lower()


def line_scores(lines: list[str], problem: Problem) -> list[float]:
    """The verifier's rule (the module's docstring) over the lines of one completion, in order: 1.0 right, 0.0 wrong,
    NaN when the line earns nothing. Stateful on purpose: what an earlier line computed or said is no news later."""
    operands = {float(x) for x in problem.operands}
    totals = {float(x) for x in problem.partial_results()}  # right running totals, left to right; the last: answer
    derived: set[float] = set()  # results of true equations of the lines so far (a later line may use them)
    earned: set[float] = set()  # running totals already paid for
    seen: set[str] = set()
    answered = False
    scores = []
    for line in lines:
        key = _line_key(line)
        if key in seen:  # the same line again (the cheapest way to lengthen a sample)
            scores.append(math.nan)
            continue
        seen.add(key)
        if "####" in line or "\\boxed" in line:
            right = _answer_value(extract_gsm8k_strict_answer(line)) == problem.answer
            scores.append(math.nan if right and answered else float(right))
            answered = answered or right
            continue
        text = _MARKER_RE.sub("", line)
        numbers = _NUMBER_RE.findall(text)
        if not numbers:
            scores.append(math.nan)
            continue
        results = []
        for expression, result in _EQUATION_RE.findall(text):
            if abs(_evaluate(expression) - float(result)) > 1e-9:
                results = None  # a false equation: the line is wrong whatever else it says
                break
            results.append(float(result))
        if results is None or not all(_number(n) in operands | totals | derived | set(results) for n in numbers):
            scores.append(0.0)
            continue
        derived.update(results)
        new = {r for r in results if r in totals and r not in operands and r not in earned}
        earned.update(new)
        scores.append(1.0 if new else math.nan)
    return scores


class WordArithmeticTask(GSM8KTask):
    """Word problems over the embedded arithmetic (+ and -), in GSM8K's format. Knobs: ``min_operands``,
    ``max_operands``, ``digits``, ``seed``, ``test_percent`` (the arithmetic task's), ``num_fewshot`` worked examples
    (picked with ``fewshot_seed`` among the first train problems, and then left out of the train split),
    ``conversational`` (default: a chat message), ``step_separator`` (default ``newline``), ``balance_operations``.

    ``balance_operations``: every split holds each sequence of operators (``+`` and ``-`` for two operands; ``++``,
    ``+-``, ``-+``, ``--`` for three...) in equal shares, taken in turn, and the worked examples show them in turn too
    (two examples: one addition, one subtraction). Off, the splits are drawn as they come: about 64% additions for two
    operands, since a story cannot give away more than there is, and a policy trained there learns to add.
    """

    name = "word_arithmetic"
    slice_attributes = ("operation", "operands", "carry_borrow")
    #: the whole test split; 64 tokens: the real-model training runs' max_completion_length (configs/real/)
    harness_defaults = HarnessDefaults(limit=500, max_new_tokens=64)

    def __init__(
        self,
        min_operands: int = 2,
        max_operands: int = 2,
        digits: int = 2,
        seed: int = 0,
        test_percent: int = 10,
        num_fewshot: int = 0,
        fewshot_seed: int = 0,
        conversational: bool = True,
        step_separator: str = "newline",
        balance_operations: bool = False,
    ):
        if not isinstance(balance_operations, bool):
            raise UserError(f"word_arithmetic: balance_operations must be true or false, got {balance_operations!r}")
        self.arithmetic = ArithmeticTask(min_operands, max_operands, digits, "+-", seed, test_percent)
        self.balance_operations = balance_operations
        super().__init__(
            num_fewshot=num_fewshot,
            fewshot_seed=fewshot_seed,
            conversational=conversational,
            step_separator=step_separator,
        )

    def operator_sequences(self) -> list[tuple[str, ...]]:
        """Every operator sequence the knobs allow, sorted (``+`` before ``-``, shorter first): the turn order of
        ``balance_operations``."""
        low, high = self.arithmetic.min_operands, self.arithmetic.max_operands
        return [ops for k in range(low - 1, high) for ops in itertools.product("+-", repeat=k)]

    def problems(self, split: str, n: int) -> list[Problem]:
        """The first `n` problems of the arithmetic task's `split` whose running count never goes below zero (with
        ``balance_operations``: each operator sequence in turn, see the class docstring)."""
        want = 2 * n
        while True:  # a prefix of any longer draw: the same problems come first
            drawn = self.arithmetic.problems(split, want, allow_fewer=True)
            kept = [p for p in drawn if min(p.partial_results()) >= 0]
            picked = _in_turn(kept, self.operator_sequences(), n) if self.balance_operations else kept[:n]
            if len(picked) >= n:
                return picked
            if len(drawn) < want:  # the knobs' whole problem space is drawn
                raise UserError(
                    f"word_arithmetic: fewer than {n} {split} problems with non-negative counts exist for these knobs"
                    + (" (balance_operations needs each operator sequence)" if self.balance_operations else "")
                )
            want *= 2

    def gsm8k_rows(self, split: str, n: int) -> list[dict]:
        """Rows in the ``openai/gsm8k`` format: ``question`` and ``answer`` (the worked solution)."""
        return [dict(zip(("question", "answer"), word_problem(p), strict=True)) for p in self.problems(split, n)]

    def _exemplars(self) -> tuple[list[tuple[str, str]], tuple | None, list[int]]:
        """``num_fewshot`` worked examples among the first :data:`FEWSHOT_POOL` train problems (GSM8KTask's hook)."""
        if self.num_fewshot == 0:
            return [], None, []
        if self.num_fewshot > FEWSHOT_POOL:
            raise UserError(f"word_arithmetic: num_fewshot must be <= {FEWSHOT_POOL}, got {self.num_fewshot}")
        pool = self.gsm8k_rows("train", FEWSHOT_POOL)
        rng = random.Random(self.fewshot_seed)
        if self.balance_operations:  # a shuffle of the pool, then its first of each operator sequence in turn
            problems = self.problems("train", FEWSHOT_POOL)
            tagged = [(problems[i], i) for i in rng.sample(range(FEWSHOT_POOL), FEWSHOT_POOL)]
            picked = [i for _, i in _in_turn(tagged, self.operator_sequences(), FEWSHOT_POOL)][: self.num_fewshot]
        else:
            picked = rng.sample(range(FEWSHOT_POOL), self.num_fewshot)
        return [(pool[i]["question"], pool[i]["answer"]) for i in picked], ("train",), picked

    def load(self, split: str, n: int | None = None) -> Dataset:
        """Rows as :meth:`GSM8KTask.load` makes them from GSM8K's rows: ``prompt``, ``answer``, ``question``,
        ``solution``. The few-shot examples are never among the train rows."""
        n = n if n is not None else SPLIT_SIZES.get(split, 500)
        exemplars, _, picked = self._exemplars()
        taken = {q for q, _ in exemplars} if split == "train" else set()
        rows = [r for r in self.gsm8k_rows(split, n + len(taken)) if r["question"] not in taken][:n]
        return Dataset.from_dict(
            {
                "prompt": [as_prompt(self.build_prompt(r["question"], exemplars), self.conversational) for r in rows],
                "answer": [gsm8k_reference_number(r["answer"]) for r in rows],
                "question": [r["question"] for r in rows],
                "solution": [r["answer"] for r in rows],
            }
        )

    def problem_attributes(self, row) -> dict[str, str]:
        """The arithmetic's slices (:meth:`Problem.attributes`: ``operation``, ``operands``, ``carry_borrow``), read
        from the row's question."""
        return problem_from_question(row.get("question") or completion_text(row["prompt"])).attributes()

    def verify_steps(self, prompt: str, completion: str) -> list[float]:
        """One score per line of the completion (1.0 right, 0.0 wrong, NaN: nothing new to check; the rule is the
        module docstring's, :func:`line_scores`), the lines as the trainer splits them."""
        return line_scores(step_texts(completion, self.step_separator), problem_from_question(prompt))
