"""The study report's figures, as PNG bytes: the online arms' validation learning curves against generated samples,
and Pass@K / Maj@K of the base, the baselines and every pick, whole and per slice (one panel per value: a gain on one
operation only shows as such), drawn by the harness's plotter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from grpo_ext.evaluation import plots
from grpo_ext.evaluation.registry import PASS_AT_1, default_ks
from grpo_ext.evaluation.slices import restrict, slice_ids
from grpo_ext.experiments.study.stats import arm_summary, largest_k
from grpo_ext.io import figure_png

__all__ = ["by_k", "model_ks", "plot_curves", "plot_passk_majk", "plot_passk_majk_by_slice", "sampled_during_training"]


def plot_curves(data: dict) -> bytes:
    """Learning curves (pass@1 on the curve's validation prompts), seed mean with a min-max band: against generated
    samples for the online arms (left: the budget they share), against optimizer steps for every arm (right: the
    offline arms drew all their samples before training, so only steps show their course)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_samples, by_steps) = plt.subplots(1, 2, figsize=(14, 5))
    colours = plt.get_cmap("tab10").colors
    for i, (name, entry) in enumerate(data["arms"].items()):
        curves = [c for c in entry["curves"] if c and c.get("points")]
        if not curves:
            continue
        colour = colours[i % len(colours)]
        _band(by_steps, curves, "step", name, colour)
        if sampled_during_training(curves):
            _band(by_samples, curves, "samples_generated", name, colour)
    by_samples.set(
        xlabel="generated samples", ylabel=f"{PASS_AT_1} (curve prompts, validation split)", title="Online arms"
    )
    by_steps.set(xlabel="optimizer steps", ylabel=f"{PASS_AT_1} (curve prompts, validation split)", title="Every arm")
    for ax in (by_samples, by_steps):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Learning curves: mean over seeds, band min-max over seeds")
    fig.tight_layout()
    return figure_png(fig)


def sampled_during_training(curves: Sequence[dict]) -> bool:
    """Whether an arm's runs generated samples while they trained (the online arms): a curve's generated samples grow
    from its first point (step 0) to its last. An offline arm drew them all before step 0 (RFT, DPO) or never (SFT).
    A run with only a first and a last point (refill's few optimizer steps) is judged like any other."""
    return any(
        "samples_generated" in c["points"][0]
        and c["points"][0]["samples_generated"] < c["points"][-1]["samples_generated"]
        for c in curves
    )


def _band(ax, curves: Sequence[dict], x: str, name: str, colour) -> None:
    """The seed mean of ``curves``' pass@1 against ``x`` on a common grid, and its min-max band."""
    grid = np.linspace(0, max(c["points"][-1][x] for c in curves), 50)
    ys = np.stack(
        [np.interp(grid, [p[x] for p in c["points"]], [p["eval/pass@1"] for p in c["points"]]) for c in curves]
    )
    ax.plot(grid, ys.mean(axis=0), label=name, color=colour)
    ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), color=colour, alpha=0.15)


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


def plot_passk_majk_by_slice(models: Mapping[str, Sequence[dict]], attribute: str) -> bytes:
    """:func:`plot_passk_majk` on each value of ``attribute`` (the problems sharing it), one panel per value; each
    model at its own Ks (:func:`model_ks`)."""
    first = next(iter(models.values()))[0]
    panels = []
    for value, ids in slice_ids(first, attribute).items():
        stats = {name: by_k([restrict(r, ids) for r in results], model_ks(results)) for name, results in models.items()}
        panels.append((f"{attribute} = {value} ({len(ids)} problems)", *_series(stats)))
    title = f"Pass@K and Maj@K per {attribute} (mean over seeds; band: 95% bootstrap over the slice's problems)"
    return plots.plot_passk_majk_panels(panels, title)


def model_ks(results: Sequence[dict]) -> list[int]:
    """The Ks a model's Pass@K and Maj@K are drawn at: those its results report (else the powers of two up to n), up
    to the largest every seed reports. A study may score some models at a larger n (the base and GRPO at 64, the
    other arms at 4): each is drawn as far as it was measured."""
    top = largest_k(results)
    return [k for k in (results[0].get("ks") or default_ks(top, with_n=False)) if k <= top]


def by_k(results: Sequence[dict], ks: Sequence[int]) -> dict:
    """Pass@K and Maj@K of one model (its seeds' results) at each of ``ks``: mean and interval."""
    summary = arm_summary(results, [f"{m}@{k}" for m in ("pass", "maj") for k in ks])
    return {m: {k: summary[f"{m}@{k}"] for k in ks} for m in ("pass", "maj")}
