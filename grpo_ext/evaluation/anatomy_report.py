"""The report's failure-anatomy table: the content-first anatomy's counts (:mod:`grpo_ext.evaluation.anatomy_adapter`)
summed per model and per slice, as shares of the samples."""

from __future__ import annotations

from collections.abc import Sequence

from grpo_ext.evaluation.anatomy_adapter import flat_counts

__all__ = ["anatomy_markdown"]


def _rows(result: dict) -> list[tuple[str, dict, int]]:
    """(slice label, counts, samples) of a result: the whole set, then each slice."""
    n = int(result["n"])
    rows = [("all", result["anatomy"], n * int(result["n_problems"]))]
    for attribute, entries in (result.get("slices") or {}).items():
        rows += [(f"{attribute} {e['value']}", e["anatomy"], n * e["n_problems"]) for e in entries if "anatomy" in e]
    return rows


def anatomy_markdown(results: Sequence[dict]) -> list[str]:
    """One table (rows: model x slice; cells: share of its samples); [] when no result has anatomy counts."""
    with_anatomy = [r for r in results if isinstance(r.get("anatomy"), dict)]
    if not with_anatomy:
        return []
    table = [
        (r["model"], label, flat_counts(counts), samples) for r in with_anatomy for label, counts, samples in _rows(r)
    ]
    kinds = list(dict.fromkeys(kind for _, _, counts, _ in table for kind in counts))
    budget = {r.get("anatomy_budget") for r in with_anatomy}
    known = (
        "Whether a sample used all max_new_tokens was counted by re-tokenising its text with the model's tokenizer."
        if budget == {"tokenizer"}
        else "For a backend without a tokenizer, whether a sample used all max_new_tokens is unknown: an unfinished "
        "sample without a number counts as no number there."
    )
    lines = [
        "## Failure anatomy (content first)",
        "",
        "Every sample is judged on what it says: the task's step verifier on every step and the final number the "
        "harness extracted (right / wrong arithmetic: a false step / wrong plan: every step true, wrong answer / "
        f"no number / unfinished: budget hit with no final number); the strict form is counted apart. {known} "
        "Shares of each row's samples.",
        "",
        "| model | slice | samples | " + " | ".join(k.replace("_", " ") for k in kinds) + " |",
        "|---|---|---:|" + "---:|" * len(kinds),
    ]
    for model, label, counts, samples in table:
        cells = [f"{counts.get(k, 0) / samples:.3f}" if samples else "–" for k in kinds]
        lines.append(f"| {model} | {label} | {samples} | " + " | ".join(cells) + " |")
    return [*lines, ""]
