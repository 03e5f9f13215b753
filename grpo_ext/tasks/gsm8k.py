"""GSM8K (Cobbe et al. 2021) in the `openai/gsm8k` format: grade-school word problems with integer answers.

Rows have ``question`` and ``answer``; the answer is a worked solution (calculator annotations ``<<48/2=24>>``
inline) ending in a line ``#### 72``. The reference answer is the text after ``####`` with commas stripped.

Data comes from the hub (``load_dataset("openai/gsm8k", "main", split=...)``) or, offline, from local files in the
same format (``data_files=``: a JSON/JSONL/parquet/CSV path, a list of paths, or a ``{split: path(s)}`` dict).

The prompt asks for step-by-step reasoning written the way ``step_separator`` splits steps (``"newline"`` by
default: one step per line; ``"blank_line"``, ``"step_k"`` or a literal separator, see
:mod:`grpo_ext.reasoning_steps`; worked examples are written the same way), and a final answer as ``\\boxed{...}``
or after ``####``. A completion's answer is the last ``\\boxed{}`` if there is one, else the number after the
last ``####``, else the last number in the text,
normalised (``grpo_ext.tasks.answers.normalize_number``).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from datasets import Dataset

from grpo_ext.errors import UserError
from grpo_ext.reasoning_steps import join_steps, step_instruction, step_rule
from grpo_ext.tasks.answers import last_boxed, last_number, normalize_boxed, normalize_number, numbers_in
from grpo_ext.tasks.base import Task
from grpo_ext.tasks.data import DataFiles, as_prompt, data_source, load_split

HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"

INSTRUCTION = (
    "Solve the following math problem. Think step by step and {steps}. "
    "Give the final answer as \\boxed{{ANSWER}} or on a last line of the form '#### ANSWER'."
)

_CALCULATOR_RE = re.compile(r"<<[^<>]*>>")


# ---- answers -------------------------------------------------------------------------------------------------


def extract_gsm8k_answer(completion: str) -> str | None:
    """The strict answer (:func:`extract_gsm8k_strict_answer`) if there is one, else the last number (the lenient
    fallback, as GSM8K's "flexible-extract" filter in lm-eval); None if the completion holds no number."""
    strict = extract_gsm8k_strict_answer(completion)
    return strict if strict is not None else last_number(completion)


def extract_gsm8k_strict_answer(completion: str) -> str | None:
    """The answer only where it is stated in GSM8K's strict form: the last ``\\boxed{}``, else the number right after
    the last ``####``; None otherwise (a bare last number is not an answer in this form)."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return normalize_boxed(boxed)
    if "####" in completion:
        numbers = numbers_in(completion.rsplit("####", 1)[1])
        if numbers:
            return normalize_number(numbers[0])
    return None


def gsm8k_reference_number(answer: str) -> str:
    """The normalised reference number of a GSM8K answer: the text after ``####`` of a worked solution, or the
    whole text of a bare answer (``"... #### 1,200"`` and ``"1200"`` both give ``1200``)."""
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return normalize_number(text)


def strip_calculator_annotations(solution: str) -> str:
    """``48/2 = <<48/2=24>>24`` -> ``48/2 = 24`` (GSM8K's calculator markup, not meant for the model)."""
    return _CALCULATOR_RE.sub("", solution)


# ---- the task ----------------------------------------------------------------------------------------------------


class GSM8KTask(Task):
    """GSM8K word problems; exact match on the normalised final number.

    Knobs: ``data_files`` (local copy in the openai/gsm8k format; default: the hub), ``dataset_name`` /
    ``dataset_config`` (hub source), ``num_fewshot`` worked examples from ``fewshot_split`` (picked with
    ``fewshot_seed``, the same ones in every prompt, calculator annotations removed), ``conversational`` (prompt as
    a one-message chat), ``step_separator`` (the step rule the prompt asks for and the trainer splits on). When the
    few-shot examples come from the very data being loaded (one local file for every split), those rows are left out
    of the loaded split.
    """

    name = "gsm8k"
    step_separator = "newline"
    #: lm-eval's GSM8K tasks stop at a new question: a base model answers, then writes the next "Question:"
    stop_strings = ("Question:",)
    strict_form = "#### n or \\boxed{n}"
    slice_attributes = ("solution_steps",)

    def __init__(
        self,
        data_files: DataFiles | None = None,
        num_fewshot: int = 0,
        fewshot_split: str = "train",
        fewshot_seed: int = 0,
        dataset_name: str = HUB_DATASET,
        dataset_config: str | None = HUB_CONFIG,
        conversational: bool = False,
        step_separator: str = "newline",
    ):
        step_rule(step_separator)
        if num_fewshot < 0:
            raise UserError(f"gsm8k: num_fewshot must be >= 0, got {num_fewshot}")
        self.data_files, self.num_fewshot = data_files, num_fewshot
        self.fewshot_split, self.fewshot_seed = fewshot_split, fewshot_seed
        self.dataset_name, self.dataset_config = dataset_name, dataset_config
        self.conversational, self.step_separator = conversational, step_separator

    # ---- prompts ---------------------------------------------------------------------------------------------
    def format_example(self, question: str, solution: str | None = None) -> str:
        """``Question: ...\\nAnswer:``, then the worked solution with its steps written as the step rule splits them
        (the final ``#### ANSWER`` line stays a line of its own)."""
        text = f"Question: {question.strip()}\nAnswer:"
        if solution is None:
            return text
        worked = strip_calculator_annotations(solution).strip()  # GSM8K's own layout: one step per line
        if self.step_separator not in ("newline", "\n"):
            lines = [line.strip() for line in worked.split("\n") if line.strip()]
            answer = [lines.pop()] if lines and lines[-1].startswith("####") else []
            worked = "\n".join([join_steps(lines, self.step_separator), *answer])
        return f"{text} {worked}"

    def build_prompt(self, question: str, exemplars: Sequence[tuple[str, str]] = ()) -> str:
        """Instruction, the worked examples, then the question (the model continues after ``Answer:``)."""
        instruction = INSTRUCTION.format(steps=step_instruction(self.step_separator))
        parts = [instruction, *(self.format_example(q, s) for q, s in exemplars), self.format_example(question)]
        return "\n\n".join(parts)

    def _hub(self) -> tuple[str, str | None]:
        return (self.dataset_name, self.dataset_config)

    def _exemplars(self) -> tuple[list[tuple[str, str]], tuple | None, list[int]]:
        if self.num_fewshot == 0:
            return [], None, []
        rows = load_split(self.data_files, self.fewshot_split, self._hub(), ("question", "answer"))
        if self.num_fewshot > len(rows):
            raise UserError(f"gsm8k: num_fewshot={self.num_fewshot} but the few-shot split has {len(rows)} rows")
        picked = random.Random(self.fewshot_seed).sample(range(len(rows)), self.num_fewshot)
        exemplars = [(rows[i]["question"], rows[i]["answer"]) for i in picked]
        return exemplars, data_source(self.data_files, self.fewshot_split, self._hub()), picked

    # ---- data ------------------------------------------------------------------------------------------------
    def load(self, split: str, n: int | None = None) -> Dataset:
        """Rows with ``prompt``, ``answer`` (normalised reference), ``question`` and ``solution``; the first `n`."""
        rows = load_split(self.data_files, split, self._hub(), ("question", "answer"))
        exemplars, fewshot_source, picked = self._exemplars()
        if fewshot_source is not None and fewshot_source == data_source(self.data_files, split, self._hub()):
            taken = set(picked)
            rows = rows.select([i for i in range(len(rows)) if i not in taken])
        if n is not None:
            rows = rows.select(range(min(n, len(rows))))
        questions, solutions = rows["question"], rows["answer"]
        return Dataset.from_dict(
            {
                "prompt": [as_prompt(self.build_prompt(q, exemplars), self.conversational) for q in questions],
                "answer": [gsm8k_reference_number(s) for s in solutions],
                "question": list(questions),
                "solution": list(solutions),
            }
        )

    # ---- verifiers -------------------------------------------------------------------------------------------
    def extract_answer(self, completion: str) -> str | None:
        return extract_gsm8k_answer(completion)

    def normalize_answer(self, answer: str) -> str:
        return gsm8k_reference_number(answer)

    def extract_strict_answer(self, completion: str) -> str | None:
        return extract_gsm8k_strict_answer(completion)

    def problem_attributes(self, row) -> dict[str, str]:
        """``solution_steps``: the lines of the reference solution before its ``####`` line (a difficulty proxy)."""
        solution = row.get("solution")
        if not solution:
            return {}
        lines = [line for line in str(solution).split("\n") if line.strip() and not line.lstrip().startswith("####")]
        return {"solution_steps": str(len(lines))}
