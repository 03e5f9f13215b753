"""MATH (Hendrycks et al. 2021): competition problems whose solutions end in ``\\boxed{answer}``.

Data: the hub copy TRL/open-r1 recipes train on, ``DigitalLearningGmbH/MATH-lighteval`` (config ``default``,
splits ``train`` 7.5k / ``test`` 5k, columns ``problem``, ``solution``, ``level``, ``type``), or local files in the
same format (``data_files=``). The reference answer is the last ``\\boxed{}`` of the solution.

Checking answers never evaluates model text. The answer is cut out of the completion with a balanced-brace
scanner (``grpo_ext.tasks.answers.last_boxed``), then compared with the reference by `math_verify` using LaTeX parsing
only (``LatexExtractionConfig``: a grammar-based LaTeX -> SymPy converter; the plain-expression mode, which goes
through SymPy's ``parse_expr``/``eval``, is never enabled). Equivalent forms agree: ``\\frac{1}{2}`` == ``0.5`` ==
``\\dfrac12``. math-verify's timeouts use ``signal.alarm``, which only works on the main thread: there the
timeouts apply (``parse_timeout``/``verify_timeout`` seconds); on other threads they are disabled
(``parsing_timeout=None``, ``timeout_seconds=None``) and answers that could make SymPy compute for ever (power
towers, huge exponents or factorials, very long answers) are compared as text instead.

The answer key used for majority voting (:func:`answer_key`) is the string form of math-verify's parse of the
boxed answer (SymPy's printer: ``\\frac{1}{2}``, ``0.5``, ``\\dfrac12`` -> ``1/2``; ``1+x^2`` -> ``x**2 + 1``), or,
when it does not parse, a stripped LaTeX normal form (:func:`latex_normal_form`). Keys that differ can still be
equivalent (``10\\%`` -> ``10*(1/100)`` vs ``0.1`` -> ``1/10``): ``is_correct`` judges each sample by
math-verify equivalence, keys only decide which samples vote together.
"""

from __future__ import annotations

import re
import threading
from functools import lru_cache

from datasets import Dataset

from grpo_ext.errors import UserError
from grpo_ext.reasoning_steps import step_instruction, step_rule
from grpo_ext.tasks.answers import last_boxed
from grpo_ext.tasks.base import Task
from grpo_ext.tasks.data import DataFiles, as_prompt, load_split

HUB_DATASET = "DigitalLearningGmbH/MATH-lighteval"
HUB_CONFIG = "default"

INSTRUCTION = "Solve the following math problem. Think step by step and {steps}. Put the final answer in \\boxed{{}}."

# Answers SymPy could spend unbounded time on when no timeout can interrupt it.
_RISKY_RE = re.compile(
    r"\^\s*\{[^{}]*\^"  # a power tower: an exponent that holds an exponent
    r"|\^\s*\{?\s*[-+]?\d{4,}"  # an exponent of 4+ digits
    r"|\d{4,}\s*!"  # a factorial of a 4+ digit number
    r"|\^\s*\{?\s*\("  # a parenthesised exponent (may hide either of the above)
)
MAX_PARSE_CHARS = 400


# ---- answer extraction -------------------------------------------------------------------------------------------


def latex_normal_form(latex: str) -> str:
    """A light textual normal form of a LaTeX answer (spacing, ``\\left``/``\\right``, ``\\dfrac``, ``\\text``...)."""
    s = latex.strip()
    s = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = re.sub(r"\\(?:left|right)(?![A-Za-z])", "", s)
    s = re.sub(r"\^\s*\{?\\circ\}?", "", s)
    for junk in ("\\!", "\\,", "\\;", "\\:", "\\ ", "\\$", "$", "~"):
        s = s.replace(junk, "")
    s = re.sub(r"\s+", "", s)
    return s.rstrip(".")


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _safe_to_parse(latex: str) -> bool:
    """Whether SymPy may look at `latex`: always with a timeout, and off the main thread only if it looks benign."""
    if len(latex) > MAX_PARSE_CHARS:
        return False
    return _on_main_thread() or _RISKY_RE.search(latex) is None


@lru_cache(maxsize=1 << 14)
def _parse_cached(latex: str, timeout: int | None) -> tuple:
    from math_verify import LatexExtractionConfig, parse

    try:
        parsed = parse(f"\\boxed{{{latex}}}", extraction_config=[LatexExtractionConfig()], parsing_timeout=timeout)
    except Exception:  # a parser crash is "no parse", never a failed run
        return ()
    return tuple(parsed)


def parse_answer(latex: str, timeout: int | None = 5) -> tuple:
    """math-verify's parse of a boxed answer (SymPy object, then the string) or ``()``; LaTeX mode only."""
    if not _safe_to_parse(latex):
        return ()
    return _parse_cached(latex, timeout if _on_main_thread() else None)


def answer_key(latex: str, timeout: int | None = 5) -> str:
    """The voting key of a LaTeX answer: SymPy's string of its parse, else :func:`latex_normal_form`."""
    parsed = parse_answer(latex, timeout)
    if parsed and not isinstance(parsed[0], str):
        return str(parsed[0])
    return latex_normal_form(latex)


def answers_equivalent(
    gold: str, predicted: str, parse_timeout: int | None = 5, verify_timeout: int | None = 5
) -> bool:
    """math-verify equivalence of two LaTeX answers (``\\frac{1}{2}`` vs ``0.5``); text equality as a fallback."""
    if latex_normal_form(gold) == latex_normal_form(predicted):
        return True
    gold_parsed, pred_parsed = parse_answer(gold, parse_timeout), parse_answer(predicted, parse_timeout)
    if not gold_parsed or not pred_parsed:
        return False
    from math_verify import verify

    try:
        return bool(
            verify(
                list(gold_parsed),
                list(pred_parsed),
                timeout_seconds=verify_timeout if _on_main_thread() else None,
            )
        )
    except Exception:
        return False


def math_reference_latex(answer: str) -> str:
    """A MATH reference answer as LaTeX: a full solution gives its last boxed content, a bare answer is kept
    (stripped)."""
    answer = str(answer)
    boxed = last_boxed(answer)
    return boxed if boxed is not None else answer.strip()


# ---- the task ----------------------------------------------------------------------------------------------------


class MathTask(Task):
    """MATH competition problems, checked with math-verify.

    The ``answer`` column holds the reference answer as LaTeX (the last ``\\boxed{}`` of the solution), which is
    what math-verify reads; :meth:`normalize_answer` turns it into the voting key. Knobs: ``data_files`` (local copy
    in the MATH format), ``dataset_name``/``dataset_config`` (hub source), ``levels``/``types`` (keep only these
    ``level``/``type`` values, e.g. ``["Level 1"]``), ``conversational``, math-verify timeouts (main thread only), and
    ``step_separator`` (the step rule the prompt asks for and the trainer splits on, see
    :mod:`grpo_ext.reasoning_steps`).
    """

    name = "math"
    step_separator = "newline"
    #: MATH's own columns: the difficulty (``Level 1``..``Level 5``) and the subject
    slice_attributes = ("level", "type")
    #: the prompt's layout (``Problem: ... Solution:``): a model that goes on to a new problem has finished (lm-eval's
    #: minerva_math stops there too)
    stop_strings = ("Problem:",)
    strict_form = "\\boxed{answer}"

    def __init__(
        self,
        data_files: DataFiles | None = None,
        dataset_name: str = HUB_DATASET,
        dataset_config: str | None = HUB_CONFIG,
        levels: list[str] | None = None,
        types: list[str] | None = None,
        conversational: bool = False,
        parse_timeout: int | None = 5,
        verify_timeout: int | None = 5,
        step_separator: str = "newline",
    ):
        step_rule(step_separator)
        self.step_separator = step_separator
        self.data_files, self.dataset_name, self.dataset_config = data_files, dataset_name, dataset_config
        self.levels, self.types, self.conversational = levels, types, conversational
        self.parse_timeout, self.verify_timeout = parse_timeout, verify_timeout

    def build_prompt(self, problem: str) -> str:
        instruction = INSTRUCTION.format(steps=step_instruction(self.step_separator))
        return f"{instruction}\n\nProblem: {problem.strip()}\nSolution:"

    def load(self, split: str, n: int | None = None) -> Dataset:
        """Rows with ``prompt``, ``answer`` (LaTeX reference answer), ``problem``, ``solution``; the first `n`."""
        rows = load_split(self.data_files, split, (self.dataset_name, self.dataset_config), ("problem", "solution"))
        for column, wanted in (("level", self.levels), ("type", self.types)):
            if wanted is not None:
                if column not in rows.column_names:
                    raise UserError(f"math: cannot filter on {column!r}: the data has no such column")
                keep = set(wanted)
                rows = rows.filter(lambda row, c=column, k=keep: row[c] in k)
        if len(rows) == 0:
            raise UserError(
                f"math: no rows left in split {split!r} after filtering (levels={self.levels}, types={self.types})"
            )
        if n is not None:
            rows = rows.select(range(min(n, len(rows))))
        answers = []
        for i, solution in enumerate(rows["solution"]):
            answer = last_boxed(solution)
            if answer is None:
                raise UserError(f"math: split {split!r} row {i}: the solution has no \\boxed{{}} answer")
            answers.append(answer)
        problems = rows["problem"]
        attributes = {c: [str(v) for v in rows[c]] for c in self.slice_attributes if c in rows.column_names}
        return Dataset.from_dict(
            {
                "prompt": [as_prompt(self.build_prompt(p), self.conversational) for p in problems],
                "answer": answers,
                "problem": list(problems),
                "solution": list(rows["solution"]),
                **attributes,
            }
        )

    def problem_attributes(self, row) -> dict[str, str]:
        """The row's ``level`` and ``type`` (MATH's columns), where the data has them."""
        return {c: str(row[c]) for c in self.slice_attributes if row.get(c) is not None}

    def extract_answer(self, completion: str) -> str | None:
        """The voting key of the completion's last boxed answer (see :func:`answer_key`), or None."""
        boxed = last_boxed(completion)
        return None if boxed is None else answer_key(boxed, self.parse_timeout)

    def normalize_answer(self, answer: str) -> str:
        return answer_key(math_reference_latex(answer), self.parse_timeout)

    def is_correct(self, completion: str, answer: str) -> bool:
        """math-verify equivalence between the completion's last boxed answer and the reference."""
        boxed = last_boxed(completion)
        if boxed is None:
            return False
        return answers_equivalent(math_reference_latex(answer), boxed, self.parse_timeout, self.verify_timeout)
