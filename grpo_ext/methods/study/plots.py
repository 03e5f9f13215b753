"""The study report's figures, as PNG bytes: the online arms' validation learning curves against generated samples,
and Pass@K / Maj@K of the base, the baselines and every pick, whole and per slice (one panel per value: a gain on one
operation only shows as such), drawn by the harness's plotter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from grpo_ext.evaluation import plots
from grpo_ext.evaluation.slices import restrict, slice_ids
from grpo_ext.io import figure_png
from grpo_ext.methods.study.stats import arm_summary

__all__ = ["by_k", "plot_curves", "plot_passk_majk", "plot_passk_majk_by_slice"]


def plot_curves(data: dict) -> bytes:
    """Learning curves (pass@1 on the curve's validation prompts) against generated samples: seed mean, min-max
    band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, entry in data["arms"].items():
        curves = [c for c in entry["curves"] if c and "samples_generated" in c["points"][-1]]
        if not curves or all(
            c["points"][1:] and c["points"][1]["samples_generated"] == c["points"][-1]["samples_generated"]
            for c in curves
        ):
            continue  # offline arms: their samples were all drawn before training (none during it)
        grid = np.linspace(0, max(c["points"][-1]["samples_generated"] for c in curves), 50)
        ys = np.stack(
            [
                np.interp(grid, [p["samples_generated"] for p in c["points"]], [p["eval/pass@1"] for p in c["points"]])
                for c in curves
            ]
        )
        (line,) = ax.plot(grid, ys.mean(axis=0), label=name)
        ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=line.get_color(), alpha=0.15)
    ax.set(
        xlabel="generated samples",
        ylabel="pass@1 (curve prompts, validation split)",
        title="Online arms: mean over seeds, band min-max over seeds",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return figure_png(fig)


def _series(stats_by_k: Mapping[str, dict]) -> tuple[list[dict], list[dict]]:
    """The harness plotter's curves and bands from :func:`by_k` per model."""
    series, bands = [], []
    for name, rows in stats_by_k.items():
        ks = sorted(rows["pass"])
        entry = {"model": name, "ks": ks}
        band = {}
        for metric in ("pass", "maj"):
            entry[f"{metric}@k"] = {str(k): rows[metric][k]["mean"] for k in ks}
            band[f"{metric}@k"] = {str(k): [rows[metric][k]["low"], rows[metric][k]["high"]] for k in ks}
        series.append(entry)
        bands.append(band)
    return series, bands


def plot_passk_majk(stats_by_k: Mapping[str, dict]) -> bytes:
    """Pass@K and Maj@K of the base, the baselines and every pick (seed means; bands: 95% bootstrap over problems),
    drawn by the harness's plotter (:func:`grpo_ext.evaluation.plots.plot_passk_majk`)."""
    series, bands = _series(stats_by_k)
    title = "Pass@K and Maj@K of the picks (mean over seeds; band: 95% bootstrap over problems)"
    return plots.plot_passk_majk(series, bands, title=title)


def plot_passk_majk_by_slice(models: Mapping[str, Sequence[dict]], attribute: str, ks: Sequence[int]) -> bytes:
    """:func:`plot_passk_majk` on each value of ``attribute`` (the problems sharing it), one panel per value."""
    first = next(iter(models.values()))[0]
    panels = []
    for value, ids in slice_ids(first, attribute).items():
        stats = {name: by_k([restrict(r, ids) for r in results], ks) for name, results in models.items()}
        panels.append((f"{attribute} = {value} ({len(ids)} problems)", *_series(stats)))
    title = f"Pass@K and Maj@K per {attribute} (mean over seeds; band: 95% bootstrap over the slice's problems)"
    return plots.plot_passk_majk_panels(panels, title)


def by_k(results: Sequence[dict], ks: Sequence[int]) -> dict:
    """Pass@K and Maj@K of one model (its seeds' results) at each of ``ks``: mean and interval."""
    summary = arm_summary(results, [f"{m}@{k}" for m in ("pass", "maj") for k in ks])
    return {m: {k: summary[f"{m}@{k}"] for k in ks} for m in ("pass", "maj")}
