"""A generic task from a JSONL file: one JSON object per line with a question and a reference answer.

``get_task("jsonl", path="data.jsonl", question_field="q", answer_field="a")``. The model's answer is the last
match of ``answer_regex`` in the completion (its one group, or the whole match if it has none); by default the
last number. Numeric answers on both sides are normalised (``1,200.0`` -> ``1200``), others compared stripped.

``attribute_fields`` names fields of the records that a report is sliced by (``["difficulty", "source"]``); every
record must have them.

``path`` may contain ``{split}`` (``data/{split}.jsonl``) to give each split its own file; otherwise the one file
serves every split. The prompt is ``prompt_template`` with ``{question}`` replaced by the question (a plain
replacement, so other braces such as ``\\boxed{}`` in the template are kept as written), or the bare question.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from datasets import Dataset

from grpo_ext.errors import UserError, user_file
from grpo_ext.tasks.answers import last_number, normalize_number
from grpo_ext.tasks.base import Task
from grpo_ext.tasks.data import as_prompt

QUESTION_PLACEHOLDER = "{question}"


class JSONLTask(Task):
    """Questions and reference answers from a JSONL file; answers matched by a regex (default: last number)."""

    name = "jsonl"

    def __init__(
        self,
        path: str | Path,
        question_field: str = "question",
        answer_field: str = "answer",
        answer_regex: str | None = None,
        prompt_template: str | None = None,
        step_separator: str | None = None,
        conversational: bool = False,
        attribute_fields: list[str] | None = None,
    ):
        if not str(path):
            raise UserError("jsonl: `path` is required (a .jsonl file, may contain '{split}')")
        self.path, self.question_field, self.answer_field = str(path), question_field, answer_field
        self.answer_regex = None
        if answer_regex is not None:
            try:
                self.answer_regex = re.compile(answer_regex)
            except re.error as err:
                raise UserError(f"jsonl: answer_regex {answer_regex!r} is not a valid regex: {err}") from err
            if self.answer_regex.groups > 1:
                raise UserError(
                    f"jsonl: answer_regex {answer_regex!r} has {self.answer_regex.groups} groups; "
                    "use one group around the answer (or non-capturing groups (?:...) elsewhere)"
                )
        if prompt_template is not None and QUESTION_PLACEHOLDER not in prompt_template:
            raise UserError(f"jsonl: prompt_template must contain {QUESTION_PLACEHOLDER!r}, got {prompt_template!r}")
        self.prompt_template, self.step_separator, self.conversational = prompt_template, step_separator, conversational
        fields = [] if attribute_fields is None else attribute_fields
        if isinstance(fields, str) or not all(isinstance(f, str) and f for f in fields):
            raise UserError(f"jsonl: attribute_fields must be a list of field names, got {attribute_fields!r}")
        reserved = {"prompt", "answer", "question"} & set(fields)
        if reserved:
            raise UserError(f"jsonl: attribute_fields cannot name {sorted(reserved)} (columns the task makes itself)")
        self.attribute_fields = tuple(fields)
        self.slice_attributes = self.attribute_fields

    # ---- data ------------------------------------------------------------------------------------------------
    def file_for(self, split: str) -> Path:
        return Path(self.path.replace("{split}", split))

    def read_rows(self, split: str) -> list[tuple[str, str, dict[str, str]]]:
        """``(question, answer, attributes)`` per non-blank line; a `UserError` names the file, the line and the
        field."""
        path = self.file_for(split)
        if not path.is_file():
            raise FileNotFoundError(f"jsonl: no such file: {path}")
        rows = []
        with user_file(path, "jsonl"), path.open(encoding="utf-8") as handle:  # unreadable, not UTF-8
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as err:
                    raise UserError(f"{path} line {lineno}: invalid JSON ({err.msg} at column {err.colno})") from None
                if not isinstance(record, dict):
                    raise UserError(f"{path} line {lineno}: expected a JSON object, got {type(record).__name__}")
                for field in (self.question_field, self.answer_field, *self.attribute_fields):
                    if field not in record or record[field] is None:
                        raise UserError(f"{path} line {lineno}: no {field!r} field (fields: {sorted(record)})")
                attributes = {field: str(record[field]) for field in self.attribute_fields}
                rows.append((str(record[self.question_field]), str(record[self.answer_field]), attributes))
        if not rows:
            raise UserError(f"{path}: no rows")
        return rows

    def build_prompt(self, question: str) -> str:
        if self.prompt_template is None:
            return question
        return self.prompt_template.replace(QUESTION_PLACEHOLDER, question)

    def load(self, split: str, n: int | None = None) -> Dataset:
        """Rows with ``prompt``, ``answer`` (normalised reference) and ``question``; the first `n`."""
        rows = self.read_rows(split)
        if n is not None:
            rows = rows[:n]
        return Dataset.from_dict(
            {
                "prompt": [as_prompt(self.build_prompt(q), self.conversational) for q, _, _ in rows],
                "answer": [self.normalize_answer(a) for _, a, _ in rows],
                "question": [q for q, _, _ in rows],
                **{field: [attrs[field] for _, _, attrs in rows] for field in self.attribute_fields},
            }
        )

    # ---- verifiers -------------------------------------------------------------------------------------------
    def extract_answer(self, completion: str) -> str | None:
        if self.answer_regex is None:
            return last_number(completion)
        matches = list(self.answer_regex.finditer(completion))
        if not matches:
            return None
        last = matches[-1]
        text = last.group(1) if self.answer_regex.groups == 1 else last.group(0)
        return None if text is None or not text.strip() else normalize_number(text)

    def normalize_answer(self, answer: str) -> str:
        return normalize_number(str(answer))

    def problem_attributes(self, row) -> dict[str, str]:
        """The row's ``attribute_fields``."""
        return {field: str(row[field]) for field in self.attribute_fields}
