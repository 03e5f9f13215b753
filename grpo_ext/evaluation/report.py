"""Reports of :func:`grpo_ext.evaluation.harness.evaluate_model` results: ``report.md``, ``report.json`` and
``passk_majk.png`` (Pass@K solid, Maj@K dashed, one colour per model: DeepSeekMath's Figure 7). Every file is
written atomically (temporary name, then ``os.replace``).

:func:`write_reports` writes them; :func:`read_report` is the one reader of ``report.json`` (the model card, the
method comparison and anything else that consumes harness results go through it).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from grpo_ext.io import atomic_write_bytes, atomic_write_text, figure_png

__all__ = ["metric_table", "plot_passk_majk", "read_report", "render_markdown", "write_reports"]

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
    return figure_png(fig)


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


# ---- reading ------------------------------------------------------------------------------------------------


def metric_table(result: dict, metric: str, where: str = "result") -> dict[int, float]:
    """``result[metric]`` (``pass@k`` or ``maj@k``, string ks as JSON holds them) as ``{k: value}``, sorted by k.

    A missing table is ``{}``; a k that is not an integer or a value that is not a finite number is a
    ``ValueError`` naming ``where``.
    """
    table = result.get(metric)
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ValueError(f"{where}: '{metric}' must map k to a number, got {type(table).__name__}")
    out = {}
    for k, value in table.items():
        try:
            k_int = int(k)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: '{metric}' has a non-integer k {k!r}") from err
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{where}: '{metric}'[{k!r}] must be a finite number, got {value!r}")
        out[k_int] = float(value)
    return dict(sorted(out.items()))


def read_report(path: str | os.PathLike, model: str | None = None, *, require: Iterable[str] = ()) -> dict:
    """One model's result from what :func:`write_reports` wrote, in the shape ``evaluate_model`` returned it.

    ``path`` is a report folder (its ``report.json``), a ``report.json`` (its ``models`` list) or a JSON file holding
    one result. With several models, ``model`` picks one: its name or the last part of its path. A result without
    ``task`` / ``task_id`` takes the report's ``task``, and one without ``params_key`` gets it from ``params``
    (results written before those keys existed stay readable). ``pass@k`` / ``maj@k`` are checked (see
    :func:`metric_table`; their ks stay strings, as written) and at least one must be there; ``require`` names
    further keys the caller needs. Errors are ``FileNotFoundError`` / ``ValueError`` naming the file.
    """
    given = Path(path)
    file = given / REPORT_JSON if given.is_dir() else given
    if not file.is_file():
        where = f"no {REPORT_JSON} in {given}" if given.is_dir() else f"no such file: {given}"
        raise FileNotFoundError(f"eval report: {where}")
    try:
        payload = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"eval report {file}: not valid JSON ({err})") from err
    if isinstance(payload, dict) and "models" not in payload and ("pass@k" in payload or "maj@k" in payload):
        payload = {"models": [payload]}  # a file holding one evaluate_model result
    models = payload.get("models") if isinstance(payload, dict) else None
    if not isinstance(models, list) or not models or not all(isinstance(m, dict) for m in models):
        raise ValueError(f"eval report {file}: expected a 'models' list of results (the harness's report.json)")

    names = [str(m.get("model")) for m in models]
    if model is not None:
        picked = [m for m, name in zip(models, names, strict=True) if model in (name, Path(name).name)]
        if len(picked) != 1:
            found = "no" if not picked else "several"
            raise ValueError(f"eval report {file}: {found} model named {model!r} (models: {', '.join(names)})")
        entry = picked[0]
    elif len(models) == 1:
        entry = models[0]
    else:
        raise ValueError(f"eval report {file}: {len(models)} models ({', '.join(names)}); name the one to read")

    where = f"eval report {file}, model {entry.get('model')!r}"
    result = dict(entry)
    result["task"] = result.get("task") or payload.get("task")
    result["task_id"] = result.get("task_id") or payload.get("task")
    if not metric_table(result, "pass@k", where) and not metric_table(result, "maj@k", where):
        raise ValueError(f"{where}: no 'pass@k' or 'maj@k' results")
    if not result["task"]:
        raise ValueError(f"{where}: no 'task'")
    missing = [key for key in require if key not in result]
    if missing:
        raise ValueError(f"{where}: not an evaluation result (missing {', '.join(missing)})")
    params = result.get("params")
    if "params_key" not in result and isinstance(params, dict) and all(name in params for name in _KEY_FIELDS):
        result["params_key"] = _params_key(params, where)
    return result


_KEY_FIELDS = ("temperature", "top_p", "max_new_tokens", "seed")  # what SamplingParams.key() names


def _params_key(params: dict, where: str) -> str:
    from grpo_ext.evaluation.sampling import SamplingParams  # imports torch: only for results that lack the key

    try:
        # n stays 1: the key leaves n out, and a greedy result's n must be 1 for SamplingParams anyway
        return SamplingParams(**{name: params[name] for name in _KEY_FIELDS}).key()
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: bad 'params' ({err})") from None
