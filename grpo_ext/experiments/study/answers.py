"""What the study's test samples say, beside its accuracy tables: the answer format and the content-first failure
anatomy (:mod:`grpo_ext.evaluation.failures`) of every model, whole and per slice, and a few samples of each.

The harness keeps, for every problem, the anatomy of its samples (right / wrong arithmetic / wrong plan / no number /
unfinished, and the same counts for the samples in the strict answer form) and an excerpt of its first samples. A
study sums them over an arm's seeds: a shortcut ("add the two numbers") shows here as *wrong plan* on subtractions,
and a gain that is format only ("right but unformatted" turned into `#### n`) as the strict-form column moving alone.

JSON (:func:`study_answers`): ``{model: {"all": summary, "by": {value: summary}}}``, each summary the one of
:func:`~grpo_ext.evaluation.failures.summarize_anatomy`; ``by`` is empty without a slice attribute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grpo_ext.evaluation.failures import anatomy_legend, anatomy_markdown, summarize_anatomy
from grpo_ext.report_format import md_header, md_row

__all__ = ["answers_markdown", "sample_rows", "samples_markdown", "study_answers"]

#: Samples shown per model for each value of the slice attribute (its first problem's excerpt).
SAMPLES_PER_VALUE = 1
#: A shown completion's characters (the excerpt keeps more).
SHOWN_CHARS = 160


def _records(results: Sequence[dict], attribute: str | None = None, value: str | None = None) -> list[dict]:
    return [
        p["anatomy"]
        for r in results
        for p in r.get("per_problem") or []
        if "anatomy" in p and (attribute is None or str((p.get("attributes") or {}).get(attribute)) == value)
    ]


def study_answers(models: Mapping[str, Sequence[dict]], attribute: str | None) -> dict:
    """Per model (its runs' test results: one per seed, or the base's one), the anatomy of all its samples and of
    each value of ``attribute``; a model whose results carry no per-problem anatomy (written before it) is left out."""
    out = {}
    for name, results in models.items():
        if not _records(results):
            continue
        values = sorted(
            {str((p.get("attributes") or {}).get(attribute)) for r in results for p in r["per_problem"]}
            if attribute
            else set()
        )
        out[name] = {
            "all": summarize_anatomy(_records(results)),
            "by": {v: summarize_anatomy(_records(results, attribute, v)) for v in values},
        }
    return out


def answers_markdown(answers: Mapping[str, dict], attribute: str | None, strict_form: str | None) -> list[str]:
    """The section: the legend, one table of every model's samples, and one per value of ``attribute``."""
    if not answers:
        return []
    kinds = {k for a in answers.values() for k in a["all"]["counts"]}
    lines = [
        "## What the samples say: answer format and failure anatomy (test)",
        "",
        "Every test sample of each model (an arm's seeds together), judged on its content first.",
        "",
        *anatomy_legend(strict_form, step_verifier="wrong" not in kinds),
        "",
        *anatomy_markdown({name: a["all"] for name, a in answers.items()}),
        "",
    ]
    values = sorted({v for a in answers.values() for v in a["by"]})
    for value in values:
        rows = {name: a["by"][value] for name, a in answers.items() if value in a["by"]}
        lines += [f"{attribute} = {value}:", "", *anatomy_markdown(rows), ""]
    return lines


def sample_rows(models: Mapping[str, Sequence[dict]], attribute: str | None) -> list[dict]:
    """For the first test problem of each value of ``attribute`` (of the whole set without one), each model's first
    excerpted sample of its first run: ``{"value", "problem_id", "question", "answer", "model", "completion",
    "kind"}``."""
    rows = []
    first = next(iter(models.values()))[0]
    chosen: dict[str, str] = {}
    for p in sorted(first.get("per_problem") or [], key=lambda p: p["problem_id"]):
        value = str((p.get("attributes") or {}).get(attribute)) if attribute else "all"
        chosen.setdefault(value, str(p["problem_id"]))
    for value, pid in sorted(chosen.items()):
        for name, results in models.items():
            excerpt = [e for e in results[0].get("excerpt") or [] if str(e["problem_id"]) == pid]
            for e in excerpt[:SAMPLES_PER_VALUE]:
                rows.append(
                    {
                        "value": value,
                        "problem_id": pid,
                        "question": e["question"],
                        "answer": e["answer"],
                        "model": name,
                        "completion": e["completion"],
                        "kind": e.get("kind"),
                    }
                )
    return rows


def _cell(text: str) -> str:
    text = text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"
    return text.replace("|", "\\|").replace("\n", " ⏎ ")


def samples_markdown(rows: Sequence[dict], attribute: str | None) -> list[str]:
    """The samples behind the numbers: per shown problem, its question (the last one of the prompt), the reference
    answer, and each model's first sample with its kind."""
    if not rows:
        return []
    lines = [
        "## Samples behind the numbers (test, first sample of each model's first run)",
        "",
        "Each run's test result holds its excerpt (`excerpt`: the first samples of every problem); ⏎ is a new line.",
        "",
    ]
    for pid in dict.fromkeys(r["problem_id"] for r in rows):
        group = [r for r in rows if r["problem_id"] == pid]
        head = group[0]
        where = f"{attribute} = {head['value']}, " if attribute else ""
        question = _cell(head["question"].split("Question:")[-1].strip())
        lines += [
            f"Problem {pid} ({where}answer {head['answer']}): {question}",
            "",
            *md_header(["model", "kind", "completion"], "lll"),
        ]
        lines += [md_row([r["model"], r["kind"] or "-", _cell(r["completion"])]) for r in group]
        lines.append("")
    return lines
