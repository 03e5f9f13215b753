"""Reports of :func:`grpo_ext.evaluation.harness.evaluate_model` results: ``report.md``, ``report.json`` and
``passk_majk.png`` (Pass@K solid, Maj@K dashed, one colour per model: DeepSeekMath's Figure 7). Every file is
written atomically (temporary name, then ``os.replace``)."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path

from grpo_ext.io import atomic_write_bytes, atomic_write_text

__all__ = ["plot_passk_majk", "render_markdown", "write_reports"]

REPORT_MD, REPORT_JSON, REPORT_PNG = "report.md", "report.json", "passk_majk.png"


def _describe_task(results: Sequence[dict]) -> str:
    first = results[0]
    problems = sorted({r["n_problems"] for r in results})
    ns = sorted({r["n"] for r in results})
    problems_text = "/".join(map(str, problems))
    n_text = "/".join(map(str, ns))
    return f"{first['task_id']} ({problems_text} problems), n={n_text}"


def _label(model: str, width: int = 32) -> str:
    """A model's name for the plot legend: long paths are shortened to their last components."""
    if len(model) <= width or "/" not in model:
        return model
    parts = model.rstrip("/").split("/")
    label = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(label) + 2 > width:
            break
        label = f"{part}/{label}"
    return "…/" + label


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def render_markdown(results: Sequence[dict], *, command: str | None = None) -> str:
    """The Markdown report: a comparison table when there are several models, then one section per model."""
    lines = [f"# Pass@K vs Maj@K: {_describe_task(results)}", ""]
    lines += [
        "pass@k: unbiased estimate of P(at least one of k samples is right); maj@k: exact expectation of "
        "P(the most frequent answer among k samples is right; ties split, no answer does not vote). Both are "
        "means over problems, from the same n samples per problem.",
        "",
    ]
    if command:
        lines += [f"Command: `{command}`", ""]
    if len(results) > 1:
        k_max = {r["model"]: r["ks"][-1] for r in results}
        lines += [
            "| model | mean accuracy | pass@1 | pass@k max | maj@k max | k max |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in results:
            k = str(k_max[r["model"]])
            lines.append(
                f"| {r['model']} | {_fmt(r['mean_accuracy'])} | {_fmt(r['pass@k'].get('1'))} | "
                f"{_fmt(r['pass@k'][k])} | {_fmt(r['maj@k'][k])} | {k} |"
            )
        lines.append("")
    for r in results:
        p = r["params"]
        s = r["samples"]
        lines += [f"## {r['model']}", "", "| k | pass@k | maj@k |", "|---:|---:|---:|"]
        lines += [f"| {k} | {_fmt(r['pass@k'][str(k)])} | {_fmt(r['maj@k'][str(k)])} |" for k in r["ks"]]
        speed = f", {s['samples_per_second']} samples/s" if s.get("samples_per_second") else ""
        lines += [
            "",
            f"- mean accuracy (mean pass@1): {_fmt(r['mean_accuracy'])}",
            f"- answers extracted: {r['answers_extracted']:.1%} of samples",
            f"- problems: {r['n_problems']} ({r['task_id']}); samples per problem n = {r['n']}",
            f"- sampling: temperature {p['temperature']}, top_p {p['top_p']}, max_new_tokens {p['max_new_tokens']}, "
            f"seed {p['seed']}, batch_size {p['batch_size']} prompts, backend {r['backend']}",
            f"- samples: {s['total']} ({s['from_cache']} from the cache, {s['generated']} drawn in "
            f"{s['seconds']:.1f} s{speed})",
        ]
        if r.get("model_fingerprint"):
            lines.append(f"- model fingerprint: `{r['model_fingerprint']}`")
        lines += [f"- warning: {w}" for w in r.get("warnings", [])]
        lines.append("")
    return "\n".join(lines)


def plot_passk_majk(results: Sequence[dict], *, title: str | None = None) -> bytes:
    """PNG bytes: Pass@K (solid, circles) and Maj@K (dashed, squares) against K on a log2 axis, y in [0, 1]."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(figsize=(9.0, 5.0), dpi=120)
    colours = plt.get_cmap("tab10").colors
    all_ks = sorted({k for r in results for k in r["ks"]})
    for i, r in enumerate(results):
        colour = colours[i % len(colours)]
        ks = r["ks"]
        ax.plot(
            ks,
            [r["pass@k"][str(k)] for k in ks],
            color=colour,
            linestyle="-",
            marker="o",
            linewidth=2.2,
            markersize=5,
            clip_on=False,
            zorder=3,
            label=f"{_label(r['model'])}: Pass@K",
        )
        ax.plot(
            ks,
            [r["maj@k"][str(k)] for k in ks],
            color=colour,
            linestyle="--",
            marker="s",
            linewidth=2.2,
            markersize=5,
            clip_on=False,
            zorder=3,
            label=f"{_label(r['model'])}: Maj@K",
        )
    if len(all_ks) > 1:
        ax.set_xscale("log", base=2)
        ax.set_xlim(all_ks[0] / 1.25, all_ks[-1] * 1.25)
    ax.xaxis.set_major_locator(FixedLocator(all_ks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(k) for k in all_ks])
    ax.set_ylim(0, 1)
    ax.set_yticks([i / 10 for i in range(11)])
    ax.grid(True, which="major", alpha=0.3)
    ax.set_xlabel("K (samples per problem)")
    ax.set_ylabel("accuracy")
    ax.set_title(title or f"Pass@K vs Maj@K: {_describe_task(results)}", fontsize=11)
    handles, labels = ax.get_legend_handles_labels()
    if len(results) > 1:  # one entry per model (its colour) plus one per line style reads best
        handles = [Line2D([], [], color=colours[i % len(colours)], linewidth=2.2) for i in range(len(results))]
        labels = [_label(r["model"]) for r in results]
        handles += [
            Line2D([], [], color="0.3", linestyle="-", marker="o"),
            Line2D([], [], color="0.3", linestyle="--", marker="s"),
        ]
        labels += ["Pass@K", "Maj@K"]
    # outside the axes, on the right: curves can sit anywhere in [0, 1]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def write_reports(
    results: Sequence[dict], out_dir, *, command: str | None = None, extra: dict | None = None
) -> dict[str, Path]:
    """Write ``report.md``, ``report.json`` and ``passk_majk.png`` into ``out_dir``; returns their paths."""
    if not results:
        raise ValueError("no results to report")
    out = Path(out_dir)
    payload = {"task": results[0]["task_id"], "command": command, **(extra or {}), "models": list(results)}
    paths = {
        "md": atomic_write_text(out / REPORT_MD, render_markdown(results, command=command)),
        "json": atomic_write_text(out / REPORT_JSON, json.dumps(payload, indent=2, ensure_ascii=False) + "\n"),
        "png": atomic_write_bytes(out / REPORT_PNG, plot_passk_majk(results)),
    }
    return paths
