"""The harness report's figures, as PNG bytes: Pass@K vs Maj@K curves with their interval bands (DeepSeekMath's
Figure 7), and per-problem accuracy of model B against model A (one panel per compared pair)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_K
from grpo_ext.io import figure_png

__all__ = ["describe_task", "plot_passk_majk", "plot_passk_majk_panels", "plot_problem_accuracy", "short_label"]


def describe_task(results: Sequence[dict]) -> str:
    """``task_id (P problems), n=N`` for a title (several values joined by ``/``)."""
    problems = "/".join(map(str, sorted({r["n_problems"] for r in results})))
    ns = "/".join(map(str, sorted({r["n"] for r in results})))
    return f"{results[0]['task_id']} ({problems} problems), n={ns}"


def short_label(model: str, width: int = 32) -> str:
    """A model's name for a legend: long paths are shortened to their last components."""
    if len(model) <= width or "/" not in model:
        return model
    parts = model.rstrip("/").split("/")
    label = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(label) + 2 > width:
            break
        label = f"{part}/{label}"
    return "…/" + label


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_passk_majk(
    results: Sequence[dict],
    intervals: Sequence[dict] | None = None,
    *,
    title: str | None = None,
    bootstrap: dict | None = None,
) -> bytes:
    """Pass@K (solid, circles) and Maj@K (dashed, squares) against K on a log2 axis, y in [0, 1]; with
    ``intervals`` (one :func:`~grpo_ext.evaluation.analysis.model_intervals` dict per result) each curve gets a
    shaded band: its bootstrap interval over problems at each K, drawn with ``bootstrap`` (its settings, named in
    the title)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9.0, 5.0), dpi=120)
    colours = _colours(plt, len(results))
    _draw_passk_majk(ax, results, intervals, colours)
    caption = title or f"Pass@K vs Maj@K: {describe_task(results)}"
    if intervals and bootstrap:
        caption += (
            f"\nbands: {bootstrap['confidence']:.0%} bootstrap intervals over problems "
            f"({bootstrap['n_resamples']} resamples, seed {bootstrap['seed']})"
        )
    ax.set_title(caption, fontsize=11)
    handles, labels = ax.get_legend_handles_labels()
    if len(results) > 1:  # one entry per model (its colour) plus one per line style reads best
        handles, labels = _legend(results, colours)
    # outside the axes, on the right: curves can sit anywhere in [0, 1]
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=9)
    fig.tight_layout()
    return figure_png(fig)


def plot_passk_majk_panels(panels: Sequence[tuple[str, Sequence[dict], Sequence[dict] | None]], title: str) -> bytes:
    """:func:`plot_passk_majk` for several subsets of the same models side by side (e.g. one panel per operation):
    ``panels`` is ``(panel title, results, intervals)``, the same models in the same order in every panel, so one
    colour is one model throughout and one legend serves all."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels) + 2.6, 5.0), dpi=120, squeeze=False)
    colours = _colours(plt, len(panels[0][1]))
    for ax, (name, results, intervals) in zip(axes[0], panels, strict=True):
        _draw_passk_majk(ax, results, intervals, colours)
        ax.set_title(name, fontsize=11)
    handles, labels = _legend(panels[0][1], colours)
    axes[0][-1].legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=9)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return figure_png(fig)


def _colours(plt, count: int) -> tuple:
    # ten distinct colours cover a harness report; a study draws more curves (the base and every arm)
    return plt.get_cmap("tab10" if count <= 10 else "tab20").colors


def _draw_passk_majk(ax, results: Sequence[dict], intervals: Sequence[dict] | None, colours: tuple) -> None:
    """Pass@K (solid, circles) and Maj@K (dashed, squares) of every result on ``ax``, with its bands."""
    from matplotlib.ticker import FixedLocator, NullLocator

    all_ks = sorted({k for r in results for k in r["ks"]})
    for i, r in enumerate(results):
        colour = colours[i % len(colours)]
        ks = r["ks"]
        bands = intervals[i] if intervals else {}
        for entry, style, marker in ((PASS_AT_K, "-", "o"), (MAJ_AT_K, "--", "s")):
            metric, name = entry.name, entry.at("K")
            name = name[0].upper() + name[1:]  # Pass@K, as the legend has always written it
            ax.plot(
                ks,
                [r[metric][str(k)] for k in ks],
                color=colour,
                linestyle=style,
                marker=marker,
                linewidth=2.2,
                markersize=5,
                clip_on=False,
                zorder=3,
                label=f"{short_label(r['model'])}: {name}",
            )
            band = bands.get(metric)
            if band and all(str(k) in band for k in ks):
                low, high = zip(*(band[str(k)] for k in ks), strict=True)
                ax.fill_between(ks, low, high, color=colour, alpha=0.13 if style == "-" else 0.08, linewidth=0)
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


def _legend(results: Sequence[dict], colours: tuple) -> tuple[list, list[str]]:
    """One entry per model (its colour), then one per line style."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=colours[i % len(colours)], linewidth=2.2) for i in range(len(results))]
    labels = [short_label(r["model"]) for r in results]
    handles += [
        Line2D([], [], color="0.3", linestyle="-", marker="o"),
        Line2D([], [], color="0.3", linestyle="--", marker="s"),
    ]
    return handles, [*labels, "Pass@K", "Maj@K"]


def plot_problem_accuracy(pairs: Sequence[tuple[str, str, np.ndarray, np.ndarray]]) -> bytes:
    """One panel per ``(name_a, name_b, accuracy_a, accuracy_b)``: each problem's fraction of correct samples, A on
    x, B on y, the same problems in the same order. Problems on the same point are drawn once, the marker's area
    growing with their number; above the diagonal B does better on that problem, below A does."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(pairs), figsize=(4.6 * len(pairs), 4.8), dpi=120, squeeze=False)
    for ax, (name_a, name_b, acc_a, acc_b) in zip(axes[0], pairs, strict=True):
        acc_a, acc_b = np.asarray(acc_a, dtype=float), np.asarray(acc_b, dtype=float)
        points = Counter(zip(np.round(acc_a, 6).tolist(), np.round(acc_b, 6).tolist(), strict=True))
        xs, ys = zip(*points, strict=True)
        counts = np.array(list(points.values()))
        ax.plot([0, 1], [0, 1], color="0.6", linewidth=1, zorder=1)
        # area proportional to the number of problems on the point (the largest about 20 points across)
        ax.scatter(xs, ys, s=10 + 300 * counts / counts.max(), alpha=0.55, color="tab:blue", zorder=2)
        above, below = int(np.sum(acc_b > acc_a)), int(np.sum(acc_b < acc_a))
        ax.set_title(
            f"{len(acc_a)} problems (area: how many on a point)\nB better on {above}, A on {below}", fontsize=9
        )
        ax.set_xlim(-0.03, 1.03)
        ax.set_ylim(-0.03, 1.03)
        ax.set_aspect("equal")
        ax.grid(True, alpha=0.3)
        ax.set_xlabel(f"A: {short_label(name_a, 40)}\nper-problem accuracy", fontsize=9)
        ax.set_ylabel(f"B: {short_label(name_b, 40)}\nper-problem accuracy", fontsize=9)
    fig.tight_layout()
    return figure_png(fig)
