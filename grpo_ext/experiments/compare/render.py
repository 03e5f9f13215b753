"""The comparison report: ``report.md``, ``report.json``, ``passk_majk.png`` and ``accuracy_vs_samples.png``.

The Markdown puts the paradigm table (generated from :data:`grpo_ext.methods.METHODS`) beside each method's pass@1,
maj@k, pass@k and training cost, then the paper's findings with their verdicts and every run's numbers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from grpo_ext.evaluation import plots
from grpo_ext.evaluation.excerpt import write_excerpt
from grpo_ext.evaluation.registry import PASS_AT_1, headline_entries
from grpo_ext.evaluation.results import EvalResult
from grpo_ext.experiments.compare.findings import findings, summarize
from grpo_ext.experiments.compare.runs import Run, settings_of
from grpo_ext.experiments.compare.slices import arm_slices, arm_slices_markdown
from grpo_ext.experiments.study.stats import headline_metrics
from grpo_ext.io import atomic_write_bytes, atomic_write_text, figure_png
from grpo_ext.methods.paradigm import BASE_RUN, get_method, paradigm_markdown, paradigm_rows
from grpo_ext.report_format import count_spread, fmt, md_header, md_row, spread

__all__ = [
    "PASSK_PNG",
    "REPORT_JSON",
    "REPORT_MD",
    "SAMPLES_PNG",
    "plot_accuracy_vs_samples",
    "plot_comparison_passk_majk",
    "render_comparison",
    "write_comparison",
]

REPORT_MD, REPORT_JSON = "report.md", "report.json"
PASSK_PNG, SAMPLES_PNG = "passk_majk.png", "accuracy_vs_samples.png"


def _title(method: str) -> str:
    return "base (start of every method)" if method == BASE_RUN else get_method(method).title


def render_comparison(
    runs: Sequence[Run],
    summary: dict,
    found: list[dict],
    warnings: list[str],
    *,
    command: str | None = None,
    slices: dict | None = None,
) -> str:
    first = runs[0].result
    p = first["params"]
    k = summary["k_max"]
    methods = [m for m in summary["methods"] if m != BASE_RUN]
    lines = ["# SFT, RFT, online RFT, DPO and GRPO under one paradigm", ""]
    if warnings:
        lines += ["> **Warning**", ">"] + [f"> - {w}" for w in warnings] + [""]
    lines += [
        f"Task `{first['task_id']}`, {first['n_problems']} held-out problems, n = {first['n']} samples per problem "
        f"(temperature {p['temperature']}, top_p {p['top_p']}, max_new_tokens {p['max_new_tokens']}, seed "
        f"{p['seed']}). pass@k: unbiased estimate; maj@k: exact expectation over k-subsets of the n samples. "
        "Numbers are the mean over a method's runs (seeds), with (min–max) when there are several.",
        "",
    ]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += ["## The paradigm (generated from `grpo_ext.methods.METHODS`)", "", paradigm_markdown(methods), ""]
    headline = headline_metrics(k)  # pass@1, maj@K, pass@K: the study's, from the registry
    lines += [
        "## Results",
        "",
        *md_header(
            ["method", "runs", *headline, "samples generated", "tokens generated", "training samples", "wall time (s)"],
            "lr" + "r" * len(headline) + "rrrr",
        ),
    ]
    for method, entry in summary["methods"].items():
        m, cost = entry["metrics"], entry.get("cost", {})
        counts = ("samples_generated", "generated_tokens", "trained_sequences", "wall_seconds")
        spreads = [spread(m[name]) for name in headline]
        lines.append(
            md_row([_title(method), len(entry["runs"]), *spreads, *(count_spread(cost.get(c)) for c in counts)])
        )
    lines += [
        "",
        "Samples generated: completions sampled to train (online methods: from the current policy during training; "
        "RFT/DPO: drawn once from the base). Training samples: sequences the gradient was computed on (a DPO pair "
        "counts two). Wall time: sampling + training, learning-curve evaluations excluded.",
        "",
        "## The paper's findings on this run",
        "",
        "Verdict rule (`grpo_ext.experiments.study.stats`, the fair stage's too): *agrees* when the 95% bootstrap "
        "interval over problems of the paired difference (runs paired by seed, the seed means compared problem by "
        "problem) is above 0 and every seed's difference is positive; *disagrees* when the interval is below 0 and "
        'every seed negative; *inconclusive* otherwise. "RL raises Maj@K more than Pass@K" judges (maj@K gain) - '
        "(pass@K gain) over the base at each K, and agrees only when every K does.",
        "",
        *md_header(["finding (DeepSeekMath)", "our run", "numbers"], "lll"),
    ]
    lines += [md_row([f["claim"], f"**{f['verdict']}**", f["text"]]) for f in found]
    lines += ["", *arm_slices_markdown(slices or {}), "## Every run", ""]
    ks = first["ks"]
    columns = [m.at(x) for m in headline_entries() for x in ks]
    lines += md_header(["run", *columns, "flags"], "l" + "r" * len(columns) + "l")
    for run in runs:
        result = EvalResult.of(run.result)
        cells = [fmt(result.table(m.name).get(x)) for m in headline_entries() for x in ks]
        lines.append(md_row([run.name, *cells, ", ".join(run.flags)]))
    lines += [
        "",
        "## Plots",
        "",
        f"![Pass@K and Maj@K per method]({PASSK_PNG})",
        "",
        f"![Accuracy against training samples]({SAMPLES_PNG})",
        "",
    ]
    return "\n".join(lines)


_COLOURS = {
    BASE_RUN: "black",
    "sft": "tab:gray",
    "rft": "tab:orange",
    "online_rft": "tab:green",
    "dpo": "tab:purple",
    "grpo_outcome": "tab:blue",
    "grpo_process": "tab:red",
}


def _colour(method: str) -> str:
    return _COLOURS.get(method, "tab:brown")


def plot_comparison_passk_majk(summary: dict) -> bytes:
    """Pass@K and Maj@K against K per method (the mean over runs; the band spans min–max), drawn by the harness's
    plotter (:func:`grpo_ext.evaluation.plots.plot_passk_majk`), the one Pass@K plot of the project."""
    series, bands = [], []
    for method, entry in summary["methods"].items():
        ks = sorted(entry[headline_entries()[0].name])
        series.append({"model": _title(method), "ks": ks})
        bands.append({})
        for metric in (m.name for m in headline_entries()):
            series[-1][metric] = {str(k): entry[metric][k]["mean"] for k in ks}
            bands[-1][metric] = {str(k): [entry[metric][k]["min"], entry[metric][k]["max"]] for k in ks}
    title = "Pass@K and Maj@K per method (mean over seeds, band: min–max)"
    return plots.plot_passk_majk(series, bands, title=title)


def plot_accuracy_vs_samples(runs: Sequence[Run], summary: dict) -> bytes:
    """Left: learning curves (pass@1 on held-out prompts against training samples), mean over seeds. Right: the
    final pass@1 of every run against the samples it generated to train."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    curve_params = None
    for method in summary["methods"]:
        curves = [r.curve for r in runs if r.method == method and r.curve and r.curve.get("points")]
        if not curves:
            continue
        curve_params = curve_params or curves[0].get("params")
        by_x: dict[int, list[float]] = {}
        for curve in curves:
            for point in curve["points"]:
                by_x.setdefault(int(point["trained_sequences"]), []).append(point["eval/pass@1"])
        xs = sorted(by_x)
        left.plot(
            xs, [np.mean(by_x[x]) for x in xs], marker="o", markersize=3, color=_colour(method), label=_title(method)
        )
        lo, hi = [min(by_x[x]) for x in xs], [max(by_x[x]) for x in xs]
        if lo != hi:
            left.fill_between(xs, lo, hi, color=_colour(method), alpha=0.15, linewidth=0)
    if curve_params:
        left.set_title(
            f"Learning curves: pass@1 on held-out prompts (n={curve_params['n']}, T={curve_params['temperature']})",
            fontsize=10,
        )
        left.legend(fontsize=8, loc="best")
    else:
        left.text(
            0.5,
            0.5,
            "no learning curves\n(train with curve_every > 0)",
            ha="center",
            va="center",
            transform=left.transAxes,
        )
    left.set_xlabel("training samples (sequences in the gradient)")
    left.set_ylabel(PASS_AT_1)
    left.grid(True, alpha=0.3)

    for run in runs:
        if run.cost is None:
            continue
        right.scatter(
            run.cost.get("samples_generated", 0),
            EvalResult.of(run.result).value(PASS_AT_1),
            color=_colour(run.method),
            s=28,
            label=_title(run.method),
        )
    base = summary["methods"].get(BASE_RUN)
    if base:
        right.axhline(
            base["metrics"][PASS_AT_1]["mean"], color="black", linestyle="--", linewidth=1, label=_title(BASE_RUN)
        )
    handles, labels = right.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        right.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    first = runs[0].result
    right.set_title(
        f"Final {PASS_AT_1} ({first['n_problems']} problems, n={first['n']}) against samples generated", fontsize=10
    )
    right.set_xlabel("samples generated to train")
    right.set_ylabel(PASS_AT_1)
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    return figure_png(fig)


def _slices(runs: Sequence[Run], by: Sequence[str] | None) -> dict:
    """Each method against the base per slice (:func:`~grpo_ext.experiments.compare.slices.arm_slices`); {} without a
    base run. A method's runs are taken in label (seed) order, as the findings take them."""
    base = next((r.result for r in runs if r.method == BASE_RUN), None)
    if base is None:
        return {}
    arms: dict[str, list[dict]] = {}
    for run in sorted((r for r in runs if r.method != BASE_RUN), key=lambda r: r.label):
        arms.setdefault(run.method, []).append(run.result)
    return arm_slices(arms, base, by)


def write_comparison(
    runs: Sequence[Run],
    out_dir,
    *,
    warnings: list[str],
    command: str | None = None,
    extra: dict | None = None,
    by: Sequence[str] | None = None,
) -> dict[str, Path]:
    """``report.md``, ``report.json``, ``passk_majk.png``, ``accuracy_vs_samples.png`` and (runs evaluated here)
    ``samples_excerpt.jsonl`` in ``out_dir``. ``by``: the attributes of the per-slice table (None: every attribute
    the problems carry; ``()``: none)."""
    out = Path(out_dir)
    summary = summarize(runs)
    found = findings(runs)
    slices = _slices(runs, by)
    methods = [m for m in summary["methods"] if m != BASE_RUN]
    payload = {
        "command": command,
        "task": runs[0].result["task_id"],
        "settings": {k: v for k, v in settings_of(runs[0].result).items() if k != "problems"},
        "params": runs[0].result["params"],
        "warnings": warnings,
        "paradigm": paradigm_rows(methods),
        "summary": summary,
        "findings": found,
        "slices": slices,
        "runs": [r.to_dict() for r in runs],
        **(extra or {}),
    }
    excerpt = write_excerpt([{"model": r.name, "excerpt": (r.result or {}).get("excerpt")} for r in runs], out)
    markdown = render_comparison(runs, summary, found, warnings, command=command, slices=slices)
    return {
        **({"excerpt": excerpt} if excerpt is not None else {}),
        "md": atomic_write_text(out / REPORT_MD, markdown),
        "json": atomic_write_text(out / REPORT_JSON, json.dumps(payload, indent=2, default=str) + "\n"),
        "passk_png": atomic_write_bytes(out / PASSK_PNG, plot_comparison_passk_majk(summary)),
        "samples_png": atomic_write_bytes(out / SAMPLES_PNG, plot_accuracy_vs_samples(runs, summary)),
    }
