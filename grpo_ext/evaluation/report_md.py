"""The Markdown of a harness report (``report.md``), in the order a skeptical reader checks a claim: the metrics'
legend, the models' summary table, each comparison (B against A), the slices (each model's and B against A's: where a
gain is, and where it is not), the failure anatomy (what wrong samples say), what moved problem by problem (each
problem's question with both models' top answers), and last the long per-model sections (every k with its interval,
the strict answer form beside pass@1, the sampling settings and stop strings). :mod:`grpo_ext.evaluation.report`
writes it beside ``report.json``."""

from __future__ import annotations

import json
from collections.abc import Sequence

from grpo_ext.evaluation.failures import anatomy_legend, anatomy_markdown, summarize_anatomy
from grpo_ext.evaluation.moved import moved_markdown
from grpo_ext.evaluation.plots import describe_task
from grpo_ext.evaluation.registry import (
    COVER_AT_TAU,
    MAJ_AT_K,
    METRICS,
    PASS_AT_1,
    PASS_AT_K,
    keyed_metrics,
    scalar_metrics,
)
from grpo_ext.evaluation.slices import MIN_SLICE_PROBLEMS, slices_markdown
from grpo_ext.report_format import md_header, md_row
from grpo_ext.report_format import signed as _signed
from grpo_ext.report_format import with_ci as _with_ci

__all__ = ["crossover_text", "render_markdown"]


def _model_section(r: dict, iv: dict) -> list[str]:
    keys = [str(k) for k in r["ks"]]
    # one column per metric keyed by k that the result holds (older results lack pass^k)
    columns = [m.name for m in keyed_metrics("k") if isinstance(r.get(m.name), dict)]
    lines = [f"## {r['model']}", "", *md_header(["k", *columns], "r" * (len(columns) + 1))]
    for k in keys:
        lines.append(md_row([k, *(_with_ci(r[m].get(k), iv.get(m, {}).get(k)) for m in columns)]))
    lines.append("")
    cover = r.get(COVER_AT_TAU.name) or {}
    if cover:
        lines += md_header(["tau", COVER_AT_TAU.title], "rr")
        lines += [f"| {t} | {_with_ci(v, iv.get(COVER_AT_TAU.name, {}).get(t))} |" for t, v in cover.items()]
        lines.append("")
    p, s = r["params"], r["samples"]
    speed = f", {s['samples_per_second']} samples/s" if s.get("samples_per_second") else ""
    lines.append(f"- mean accuracy (mean pass@1): {_with_ci(r['mean_accuracy'], iv.get('mean_accuracy'))}")
    if "distinct_answers" in r:
        lines.append(
            f"- answer diversity: {_with_ci(r['distinct_answers'], iv.get('distinct_answers'))} distinct answers per "
            f"problem, entropy {_with_ci(r['answer_entropy'], iv.get('answer_entropy'))} bits"
        )
    if "strict_accuracy" in r and r.get("strict_form"):  # a task whose only form is strict has nothing to add
        lines.append(
            f"- strict form (`{r['strict_form']}`): {_with_ci(r['strict_share'], iv.get('strict_share'))} of samples; "
            "strict pass@1 "
            f"{_with_ci(r['strict_accuracy'], iv.get('strict_accuracy'))} beside pass@1 {r['mean_accuracy']:.3f} "
            f"(right but unformatted: {r['mean_accuracy'] - r['strict_accuracy']:.3f})"
        )
    stops = p.get("stop")
    stop = ", ".join(json.dumps(x) for x in stops) if stops else "none"
    lines += [
        f"- answers extracted: {r['answers_extracted']:.1%} of samples",
        f"- problems: {r['n_problems']} ({r['task_id']}); samples per problem n = {r['n']}",
        f"- sampling: temperature {p['temperature']}, top_p {p['top_p']}, max_new_tokens {p['max_new_tokens']}, "
        f"seed {p['seed']}, stop strings {stop}, batch_size {p['batch_size']} prompts, backend {r['backend']}",
        f"- samples: {s['total']} ({s['from_cache']} from the cache, {s['generated']} drawn in "
        f"{s['seconds']:.1f} s{speed})",
    ]
    if r.get("model_fingerprint"):
        lines.append(f"- model fingerprint: `{r['model_fingerprint']}`")
    lines += [f"- warning: {w}" for w in r.get("warnings", [])]
    return [*lines, ""]


def crossover_text(c: dict, n: int, names: tuple[str, str] = ("A", "B")) -> str:
    """The crossover of a comparison in words, the two models called ``names`` (A's, B's)."""
    never = f"none within k <= {n}"
    if c["leader"] is None:
        same = f"{names[0]} and {names[1]} have the same pass@{c['ks'][0]}"
        return f"{same}: neither leads, so there is no crossover to find"
    leader, trailer = names if c["leader"] == "a" else names[::-1]
    where = f"{leader} leads at k = {c['ks'][0]}"
    if c["k"] is None:
        return f"{where}; {trailer}'s pass@k never reaches {leader}'s: {never}"
    low = never if c["low"] is None else str(c["low"])
    high = never if c["high"] is None else str(c["high"])
    share = f"; no crossover in {c['no_crossover_share']:.0%} of the resamples" if c["no_crossover_share"] else ""
    return f"{where}; {trailer}'s pass@k reaches {leader}'s at k = {c['k']} (interval {low} to {high}{share})"


def _summary_table(results: Sequence[dict], intervals: Sequence[dict]) -> list[str]:
    """One row per model: pass@1, pass@k and maj@k at its largest k, answer diversity (each with its interval)."""
    passes, majs = PASS_AT_K.name, MAJ_AT_K.name
    headers = ["model", PASS_AT_1, f"{passes} max", f"{majs} max", "k max", "distinct answers"]
    lines = md_header(headers, "lrrrrr")
    for r, iv in zip(results, intervals, strict=True):
        k = str(r["ks"][-1])
        lines.append(
            f"| {r['model']} | {_with_ci(r[passes].get('1'), iv.get(passes, {}).get('1'))} | "
            f"{_with_ci(r[passes][k], iv.get(passes, {}).get(k))} | "
            f"{_with_ci(r[majs][k], iv.get(majs, {}).get(k))} | {k} | "
            f"{_with_ci(r.get('distinct_answers'), iv.get('distinct_answers'))} |"
        )
    return [*lines, ""]


def _comparison_section(c: dict, confidence: float) -> list[str]:
    d = c["difference"]
    per_k = [m.name for m in keyed_metrics("k")]
    lines = [
        f"## B against A: {c['b']} (B) vs {c['a']} (A)",
        "",
        f"Paired by problem ({c['n_problems']} problems both were scored on). Differences are B - A with "
        f"{confidence:.0%} bootstrap intervals (bold: the interval excludes 0). Solved = pass@k >= "
        f"{c['solved_threshold']} (at k = n: at least one of the n samples right).",
        "",
        *md_header(
            ["k", *(f"Δ {m}" for m in per_k), "solved by both", "only A", "only B", "neither"], "r" * (len(per_k) + 5)
        ),
    ]
    for k in c["ks"]:
        key, o = str(k), c["solved_overlap"][str(k)]
        cells = [_signed(d.get(m, {}).get(key)) for m in per_k]
        counts = [str(o[f]) for f in ("both", "only_a", "only_b", "neither")]
        lines.append(md_row([k, *cells, *counts]))
    lines += ["", f"- crossover of pass@k: {crossover_text(c['crossover'], c['n'])}"]
    for t, diff in d.get(COVER_AT_TAU.name, {}).items():
        lines.append(f"- Δ Cover@{t}: {_signed(diff)}")
    for metric in scalar_metrics():
        if metric.name in d:
            lines.append(f"- Δ {metric.title}: {_signed(d[metric.name])}")
    return [*lines, ""]


def _anatomy_section(results: Sequence[dict]) -> list[str]:
    """The failure anatomy (:mod:`grpo_ext.evaluation.failures`) of each model that has one: all its samples, then
    each slice's; [] when none has (a task without a step verifier, a report written before the anatomy)."""
    with_anatomy = [r for r in results if isinstance(r.get("anatomy"), dict)]
    if not with_anatomy:
        return []
    rows = {}
    for r in with_anatomy:
        rows[r["model"]] = summarize_anatomy([r["anatomy"]])
        for attribute, entries in (r.get("slices") or {}).items():
            for e in entries:
                if "anatomy" in e:
                    rows[f"{r['model']}: {attribute} {e['value']}"] = summarize_anatomy([e["anatomy"]])
    budget = {r.get("anatomy_budget") for r in with_anatomy}
    known = (
        "Whether a sample used all max_new_tokens was counted by re-tokenising its text with the model's tokenizer."
        if budget == {"tokenizer"}
        else "For a backend without a tokenizer, whether a sample used all max_new_tokens is unknown: an unfinished "
        "sample without a number counts as no number there."
    )
    first = with_anatomy[0]
    legend = anatomy_legend(first.get("strict_form"), step_verifier="wrong" not in first["anatomy"])
    table = anatomy_markdown(rows, "model: slice")
    return [
        "## Failure anatomy (content first)",
        "",
        *legend,
        "",
        f"{known} Shares of each row's samples.",
        "",
        *table,
        "",
    ]


def render_markdown(
    results: Sequence[dict],
    analysis: dict | None = None,
    *,
    command: str | None = None,
    paired: Sequence[dict] = (),
    min_slice_problems: int = MIN_SLICE_PROBLEMS,
    notes: Sequence[str] = (),
) -> str:
    """The Markdown report (in the module docstring's order): the legend, the summary table, each comparison (B
    against A), the slices, the failure anatomy, what moved, then one section per model (every mean with its
    interval when ``analysis`` is given: :func:`grpo_ext.evaluation.analysis.analyze`).
    ``paired``: per comparison ``{"a", "b", "moved", "slices"}`` (what :func:`~grpo_ext.evaluation.report.write_reports`
    adds to it); ``notes``: paragraphs shown first, under the command, each as a "Note" quote."""
    intervals = analysis["intervals"] if analysis else [{} for _ in results]
    # the legend's lines: the registry's, in its order (a metric without one is covered by another's line)
    legend = [m.legend for m in METRICS.values() if m.legend]
    lines = [f"# Pass@K vs Maj@K: {describe_task(results)}", "", *legend, ""]
    lines.append("Every value is a mean over problems, from the same n samples per problem.")
    if analysis:
        b = analysis["bootstrap"]
        lines[-1] += (
            f" In brackets: its {b['confidence']:.0%} percentile bootstrap interval over problems "
            f"({b['n_resamples']} resamples, seed {b['seed']}); differences between models are paired by problem."
        )
    lines.append("")
    if command:
        lines += [f"Command: `{command}`", ""]
    for note in notes:
        lines += [f"> **Note.** {note}", ""]
    lines += _summary_table(results, intervals)
    extra = {(p["a"], p["b"]): p for p in paired}
    compared = [c for c in (analysis or {}).get("comparisons", []) if c is not None]
    confidence = analysis["bootstrap"]["confidence"] if analysis else 0.95
    for c in compared:
        lines += _comparison_section(c, confidence)
    lines += slices_markdown(results, paired, confidence, min_slice_problems) + _anatomy_section(results)
    for c in compared:
        lines += moved_markdown(extra.get((c["a"], c["b"]), {}))
    for r, iv in zip(results, intervals, strict=True):
        lines += _model_section(r, iv)
    return "\n".join(lines)
