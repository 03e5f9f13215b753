"""GSM8K (Cobbe et al. 2021) in the `openai/gsm8k` format: grade-school word problems with integer answers.

Rows have ``question`` and ``answer``; the answer is a worked solution (calculator annotations ``<<48/2=24>>``
inline) ending in a line ``#### 72``. The reference answer is the text after ``####`` with commas stripped.

Data comes from the hub (``load_dataset("openai/gsm8k", "main", split=...)``) or, offline, from local files in the
same format (``data_files=``: a JSON/JSONL/parquet/CSV path, a list of paths, or a ``{split: path(s)}`` dict).

The prompt asks for step-by-step reasoning, one step per line (``step_separator = "\\n"``), and a final answer as
``\\boxed{...}`` or after ``####``. A completion's answer is the last ``\\boxed{}`` if there is one, else the number
after the last ``####``, else the last number in the text, normalised (see :func:`normalize_number`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path

from datasets import Dataset, load_dataset

from grpo_ext.tasks.base import Task

HUB_DATASET = "openai/gsm8k"
HUB_CONFIG = "main"

INSTRUCTION = (
    "Solve the following math problem. Think step by step and write each step on its own line. "
    "Give the final answer as \\boxed{ANSWER} or on a last line of the form '#### ANSWER'."
)

# A number: thousands groups (1,234,567) or plain digits, optional decimals; or a bare decimal (.5).
_NUMBER_RE = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|-?\.\d+")
_CALCULATOR_RE = re.compile(r"<<[^<>]*>>")
_TEXT_WRAPPER_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")

DataFiles = str | Path | Sequence[str | Path] | dict[str, str | Path | Sequence[str | Path]]


# ---- answer normalisation ------------------------------------------------------------------------------------


def normalize_number(text: str) -> str:
    """A number in canonical form: ``$1,200.`` -> ``1200``, ``12.0`` -> ``12``, ``-0`` -> ``0``, ``0.50`` -> ``0.5``.

    Strips whitespace, ``$``/``\\$``, commas, ``%``, and a trailing ``.``; text that is not a number after that is
    returned as given, only stripped (so it can still be compared and voted on).
    """
    text = text.strip()
    s = text
    for junk in ("\\$", "$", ",", "\\%", "%", "\\!", "\\,", " "):
        s = s.replace(junk, "")
    s = s.rstrip(".")
    try:
        value = Decimal(s)
    except InvalidOperation:
        return text
    if not value.is_finite():
        return text
    if value == value.to_integral_value():
        return str(int(value))  # int(Decimal("-0")) == 0
    return format(value.normalize(), "f")


def _numbers(text: str) -> list[str]:
    """Every number in `text`, left to right; a ``-`` counts as a sign only when it follows no digit/letter/``)``."""
    out = []
    for match in _NUMBER_RE.finditer(text):
        number, start = match.group(), match.start()
        if number.startswith("-") and start > 0 and (text[start - 1].isalnum() or text[start - 1] in ")]}"):
            number = number[1:]  # "5-3": a subtraction, not -3
        out.append(number)
    return out


def last_number(text: str) -> str | None:
    """The last number in `text`, normalised, or None."""
    numbers = _numbers(text)
    return normalize_number(numbers[-1]) if numbers else None


def normalize_boxed(content: str) -> str | None:
    """A ``\\boxed{}`` content as a GSM8K answer key: the number it holds (``18\\text{ dollars}`` -> ``18``)."""
    content = _TEXT_WRAPPER_RE.sub(r" \1 ", content).strip()
    if not content:
        return None
    direct = normalize_number(content)
    if _NUMBER_RE.fullmatch(direct):
        return direct
    number = last_number(content)
    return number if number is not None else direct


def extract_gsm8k_answer(completion: str) -> str | None:
    """Boxed answer if present, else the number after the last ``####``, else the last number; None if none."""
    from grpo_ext.tasks.math import last_boxed  # math.py owns the balanced-brace \boxed parser

    boxed = last_boxed(completion)
    if boxed is not None:
        return normalize_boxed(boxed)
    if "####" in completion:
        tail = completion.rsplit("####", 1)[1]
        numbers = _numbers(tail)
        if numbers:
            return normalize_number(numbers[0])
    return last_number(completion)


def reference_answer(answer: str) -> str:
    """The reference answer of a GSM8K solution: the text after ``####`` (or the whole text), normalised."""
    text = str(answer)
    if "####" in text:
        text = text.rsplit("####", 1)[1]
    return normalize_number(text)


def strip_calculator_annotations(solution: str) -> str:
    """``48/2 = <<48/2=24>>24`` -> ``48/2 = 24`` (GSM8K's calculator markup, not meant for the model)."""
    return _CALCULATOR_RE.sub("", solution)


# ---- data loading (shared with the MATH task) ------------------------------------------------------------------

_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def _as_paths(files) -> list[str]:
    paths = [files] if isinstance(files, (str, Path)) else list(files)
    if not paths:
        raise ValueError("data_files is empty")
    out = []
    for path in paths:
        path = str(path)
        if "://" not in path and not any(ch in path for ch in "*?[") and not Path(path).is_file():
            raise FileNotFoundError(f"data_files: no such file: {path}")
        out.append(path)
    return out


def _builder(paths: list[str]) -> str:
    suffixes = {Path(p.split("?")[0]).suffix.lower() for p in paths}
    builders = {_BUILDERS.get(s) for s in suffixes}
    if None in builders or len(builders) != 1:
        raise ValueError(
            f"data_files: cannot tell the format of {paths}; use one kind of .json/.jsonl/.parquet/.csv files"
        )
    return builders.pop()


def data_source(data_files: DataFiles | None, split: str, hub: tuple[str, str | None]) -> tuple:
    """A hashable description of where `split` comes from (equal sources hold the same rows)."""
    if data_files is None:
        return ("hub", *hub, split)
    if isinstance(data_files, dict):
        if split not in data_files:
            raise ValueError(f"data_files has no {split!r} split (splits: {sorted(data_files)})")
        return ("files", *_as_paths(data_files[split]))
    return ("files", *_as_paths(data_files))


def load_split(
    data_files: DataFiles | None, split: str, hub: tuple[str, str | None], columns: Sequence[str]
) -> Dataset:
    """Rows of `split`: from the hub dataset `hub` = (name, config), or from local `data_files`.

    `data_files` may be one path or a list of paths (then that data serves every split asked for) or a
    ``{split: path(s)}`` dict. The `columns` must exist; a missing one is named in the error.
    """
    source = data_source(data_files, split, hub)
    if source[0] == "hub":
        dataset = load_dataset(hub[0], hub[1], split=split)
        where = f"{hub[0]} ({hub[1]}) split {split!r}"
    else:
        paths = list(source[1:])
        dataset = load_dataset(_builder(paths), data_files={split: paths}, split=split)
        where = ", ".join(paths)
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise ValueError(f"{where}: missing column(s) {missing} (columns: {dataset.column_names})")
    if len(dataset) == 0:
        raise ValueError(f"{where}: no rows")
    return dataset


def as_prompt(text: str, conversational: bool):
    """A prompt as TRL takes it: the text, or a one-message user turn for chat models."""
    return [{"role": "user", "content": text}] if conversational else text


# ---- the task ----------------------------------------------------------------------------------------------------


class GSM8KTask(Task):
    """GSM8K word problems; exact match on the normalised final number.

    Knobs: ``data_files`` (local copy in the openai/gsm8k format; default: the hub), ``dataset_name`` /
    ``dataset_config`` (hub source), ``num_fewshot`` worked examples from ``fewshot_split`` (picked with
    ``fewshot_seed``, the same ones in every prompt, calculator annotations removed), ``conversational`` (prompt as
    a one-message chat). When the few-shot examples come from the very data being loaded (one local file for
    every split), those rows are left out of the loaded split.
    """

    name = "gsm8k"
    step_separator = "\n"

    def __init__(
        self,
        data_files: DataFiles | None = None,
        num_fewshot: int = 0,
        fewshot_split: str = "train",
        fewshot_seed: int = 0,
        dataset_name: str = HUB_DATASET,
        dataset_config: str | None = HUB_CONFIG,
        conversational: bool = False,
    ):
        if num_fewshot < 0:
            raise ValueError(f"gsm8k: num_fewshot must be >= 0, got {num_fewshot}")
        self.data_files, self.num_fewshot = data_files, num_fewshot
        self.fewshot_split, self.fewshot_seed = fewshot_split, fewshot_seed
        self.dataset_name, self.dataset_config = dataset_name, dataset_config
        self.conversational = conversational

    # ---- prompts ---------------------------------------------------------------------------------------------
    @staticmethod
    def format_example(question: str, solution: str | None = None) -> str:
        text = f"Question: {question.strip()}\nAnswer:"
        return text if solution is None else f"{text} {strip_calculator_annotations(solution).strip()}"

    def build_prompt(self, question: str, exemplars: Sequence[tuple[str, str]] = ()) -> str:
        """Instruction, the worked examples, then the question (the model continues after ``Answer:``)."""
        parts = [INSTRUCTION, *(self.format_example(q, s) for q, s in exemplars), self.format_example(question)]
        return "\n\n".join(parts)

    def _hub(self) -> tuple[str, str | None]:
        return (self.dataset_name, self.dataset_config)

    def _exemplars(self) -> tuple[list[tuple[str, str]], tuple | None, list[int]]:
        if self.num_fewshot == 0:
            return [], None, []
        rows = load_split(self.data_files, self.fewshot_split, self._hub(), ("question", "answer"))
        if self.num_fewshot > len(rows):
            raise ValueError(f"gsm8k: num_fewshot={self.num_fewshot} but the few-shot split has {len(rows)} rows")
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
                "answer": [reference_answer(s) for s in solutions],
                "question": list(questions),
                "solution": list(solutions),
            }
        )

    # ---- verifiers -------------------------------------------------------------------------------------------
    def extract_answer(self, completion: str) -> str | None:
        return extract_gsm8k_answer(completion)

    def normalize_answer(self, answer: str) -> str:
        return reference_answer(answer)
