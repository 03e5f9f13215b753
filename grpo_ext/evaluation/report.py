"""Reports of :func:`grpo_ext.evaluation.harness.evaluate_model` results: ``report.md``, ``report.json``,
``passk_majk.png`` (Pass@K solid, Maj@K dashed, one colour per model, interval bands: DeepSeekMath's Figure 7) and,
with two or more models, ``per_problem_accuracy.png`` (model B against model A, problem by problem). Every file is
written atomically (temporary name, then ``os.replace``), and the folder as a whole can be told from a mix of two
runs: ``report.json`` is written first with ``"complete": false``, then the other files, then ``report.json`` again
with ``"complete": true``. A write that fails part-way (a full disk) leaves a report.json that :func:`read_report`
refuses; a report.json without the key (written before it existed) reads as before. Model paths are recorded as
:func:`grpo_ext.io.portable_path` gives them (relative to the repository when inside it).

:func:`write_reports` writes them, with the intervals and model comparisons of :mod:`grpo_ext.evaluation.analysis`;
:func:`read_report` is the one reader of ``report.json`` (the model card, the method comparison and anything else
that consumes harness results go through it).

``report.json``: ``{"complete", "task", "command", ..., "bootstrap": {"n_resamples", "seed", "confidence", "method",
"unit"}, "models": [each result, plus "intervals": {metric: {key: [low, high]}}], "comparisons": [{"a", "b",
"difference", "solved_overlap", "crossover", ...}]}``. Each per-problem record sits on one line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from grpo_ext.errors import UserError
from grpo_ext.evaluation.analysis import (
    DEFAULT_BOOTSTRAP,
    SOLVED_THRESHOLD,
    BootstrapSettings,
    analyze,
    per_problem_values,
)
from grpo_ext.evaluation.plots import describe_task, plot_passk_majk, plot_problem_accuracy
from grpo_ext.evaluation.registry import METRICS, keyed_metrics, scalar_metrics
from grpo_ext.io import atomic_write_bytes, atomic_write_text, portable_path

__all__ = [
    "crossover_text",
    "json_text",
    "metric_table",
    "plot_passk_majk",
    "read_comparisons",
    "read_report",
    "render_markdown",
    "write_reports",
]

REPORT_MD, REPORT_JSON, REPORT_PNG = "report.md", "report.json", "passk_majk.png"
SCATTER_PNG = "per_problem_accuracy.png"

# the legend's lines: the registry's, in its order (a metric without one is covered by another's line)
_LEGEND = [m.legend for m in METRICS.values() if m.legend]


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def _with_ci(value: float | None, interval) -> str:
    """``0.455 [0.410, 0.500]`` (the interval when there is one)."""
    if value is None:
        return "–"
    return f"{value:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else f"{value:.3f}"


def _signed(d: dict | None) -> str:
    """A difference with its interval, ``+0.120 [+0.080, +0.160]``; bold where the interval excludes 0."""
    if d is None:
        return "–"
    text = f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
    return f"**{text}**" if d["low"] > 0 or d["high"] < 0 else text


def _model_section(r: dict, iv: dict) -> list[str]:
    keys = [str(k) for k in r["ks"]]
    # one column per metric keyed by k that the result holds (older results lack pass^k)
    columns = [m.name for m in keyed_metrics("k") if isinstance(r.get(m.name), dict)]
    header = "| k | " + " | ".join(columns) + " |"
    lines = [f"## {r['model']}", "", header, "|---:|" + "---:|" * len(columns)]
    for k in keys:
        cells = [_with_ci(r[m].get(k), iv.get(m, {}).get(k)) for m in columns]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines.append("")
    cover = r.get("cover@tau") or {}
    if cover:
        lines += ["| tau | Cover@tau |", "|---:|---:|"]
        lines += [f"| {t} | {_with_ci(v, iv.get('cover@tau', {}).get(t))} |" for t, v in cover.items()]
        lines.append("")
    p, s = r["params"], r["samples"]
    speed = f", {s['samples_per_second']} samples/s" if s.get("samples_per_second") else ""
    lines.append(f"- mean accuracy (mean pass@1): {_with_ci(r['mean_accuracy'], iv.get('mean_accuracy'))}")
    if "distinct_answers" in r:
        lines.append(
            f"- answer diversity: {_with_ci(r['distinct_answers'], iv.get('distinct_answers'))} distinct answers per "
            f"problem, entropy {_with_ci(r['answer_entropy'], iv.get('answer_entropy'))} bits"
        )
    lines += [
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
    return [*lines, ""]


def crossover_text(c: dict, n: int) -> str:
    """The crossover of a comparison in words."""
    never = f"none within k <= {n}"
    if c["leader"] is None:
        return f"A and B have the same pass@{c['ks'][0]}: neither leads, so there is no crossover to find"
    leader, trailer = c["leader"].upper(), "B" if c["leader"] == "a" else "A"
    where = f"{leader} leads at k = {c['ks'][0]}"
    if c["k"] is None:
        return f"{where}; {trailer}'s pass@k never reaches {leader}'s: {never}"
    low = never if c["low"] is None else str(c["low"])
    high = never if c["high"] is None else str(c["high"])
    share = f"; no crossover in {c['no_crossover_share']:.0%} of the resamples" if c["no_crossover_share"] else ""
    return f"{where}; {trailer}'s pass@k reaches {leader}'s at k = {c['k']} (interval {low} to {high}{share})"


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
        "| k | " + " | ".join(f"Δ {m}" for m in per_k) + " | solved by both | only A | only B | neither |",
        "|---:|" + "---:|" * (len(per_k) + 4),
    ]
    for k in c["ks"]:
        key, o = str(k), c["solved_overlap"][str(k)]
        cells = [_signed(d.get(m, {}).get(key)) for m in per_k]
        counts = [str(o[f]) for f in ("both", "only_a", "only_b", "neither")]
        lines.append(f"| {k} | " + " | ".join(cells + counts) + " |")
    lines += ["", f"- crossover of pass@k: {crossover_text(c['crossover'], c['n'])}"]
    for t, diff in d.get("cover@tau", {}).items():
        lines.append(f"- Δ Cover@{t}: {_signed(diff)}")
    for metric in scalar_metrics():
        if metric.name in d:
            lines.append(f"- Δ {metric.title}: {_signed(d[metric.name])}")
    return [*lines, ""]


def render_markdown(results: Sequence[dict], analysis: dict | None = None, *, command: str | None = None) -> str:
    """The Markdown report: the metrics' legend, a summary table when there are several models, one section per
    model (every mean with its interval when ``analysis`` is given: :func:`grpo_ext.evaluation.analysis.analyze`),
    then one section per comparison (B against A)."""
    intervals = analysis["intervals"] if analysis else [{} for _ in results]
    lines = [f"# Pass@K vs Maj@K: {describe_task(results)}", "", *_LEGEND, ""]
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
    if len(results) > 1:
        lines += [
            "| model | pass@1 | pass@k max | maj@k max | k max | distinct answers |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r, iv in zip(results, intervals, strict=True):
            k = str(r["ks"][-1])
            lines.append(
                f"| {r['model']} | {_with_ci(r['pass@k'].get('1'), iv.get('pass@k', {}).get('1'))} | "
                f"{_with_ci(r['pass@k'][k], iv.get('pass@k', {}).get(k))} | "
                f"{_with_ci(r['maj@k'][k], iv.get('maj@k', {}).get(k))} | {k} | "
                f"{_with_ci(r.get('distinct_answers'), iv.get('distinct_answers'))} |"
            )
        lines.append("")
    for r, iv in zip(results, intervals, strict=True):
        lines += _model_section(r, iv)
    for c in (analysis or {}).get("comparisons", []):
        if c is not None:
            lines += _comparison_section(c, analysis["bootstrap"]["confidence"])
    return "\n".join(lines)


def json_text(payload) -> str:
    """``payload`` as indented JSON, except that each per-problem record and each short list or object stays on one
    line (a report at n = 1024 over hundreds of problems stays readable and small)."""

    def render(value, pad: str, inline: bool) -> str:
        flat = json.dumps(value, ensure_ascii=False)
        if inline or not isinstance(value, (dict, list)) or not value or len(pad) + len(flat) <= 100:
            return flat
        inner = pad + "  "
        if isinstance(value, list):
            items = [inner + render(v, inner, False) for v in value]
            return "[\n" + ",\n".join(items) + "\n" + pad + "]"
        items = []
        for key, v in value.items():
            text = json.dumps(str(key), ensure_ascii=False) + ": "
            if key == "per_problem" and isinstance(v, list) and v:
                rows = [inner + "  " + render(row, "", True) for row in v]
                items.append(inner + text + "[\n" + ",\n".join(rows) + "\n" + inner + "]")
            else:
                items.append(inner + text + render(v, inner, False))
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"

    return render(payload, "", False) + "\n"


def _accuracy_pairs(results: Sequence[dict], comparisons: Sequence[dict | None]) -> list[tuple]:
    """(A name, B name, A's per-problem accuracy, B's) of every comparison, on the problems both were scored on."""
    by_name = {r["model"]: r for r in results}
    pairs = []
    for c in comparisons:
        if c is None:
            continue
        a, b = by_name[c["a"]], by_name[c["b"]]
        ids = [str(p["problem_id"]) for p in a["per_problem"]]
        in_b = {str(p["problem_id"]) for p in b["per_problem"]}
        ids = [i for i in ids if i in in_b]
        acc = [per_problem_values(m, "mean_accuracy", ids=ids) for m in (a, b)]
        pairs.append((c["a"], c["b"], *acc))
    return pairs


def write_reports(
    results: Sequence[dict],
    out_dir,
    *,
    command: str | None = None,
    extra: dict | None = None,
    bootstrap: BootstrapSettings = DEFAULT_BOOTSTRAP,
    solved_threshold: float = SOLVED_THRESHOLD,
) -> dict[str, Path]:
    """Write ``report.md``, ``report.json``, ``passk_majk.png`` and (two or more comparable models)
    ``per_problem_accuracy.png`` into ``out_dir``; returns their paths. ``bootstrap`` draws every interval (recorded
    in the report); a model *solves* a problem at k when its pass@k is >= ``solved_threshold``.

    ``report.json`` is written first marked ``"complete": false`` and last marked ``"complete": true`` (see the
    module's docstring); a ``per_problem_accuracy.png`` of an earlier run that this report has no pairs for is
    removed. A model that is a local path is named as :func:`~grpo_ext.io.portable_path` gives it."""
    if not results:
        raise ValueError("no results to report")
    results = [{**r, "model": portable_path(r["model"])} for r in results]
    analysis = analyze(results, bootstrap, solved_threshold)
    out = Path(out_dir)
    models = [{**r, "intervals": iv} for r, iv in zip(results, analysis["intervals"], strict=True)]
    payload = {
        "complete": False,
        "task": results[0]["task_id"],
        "command": command,
        **(extra or {}),
        "bootstrap": analysis["bootstrap"],
        "models": models,
        "comparisons": [c for c in analysis["comparisons"] if c is not None],
    }
    # Everything is rendered before the first write, so only a write can stop part-way; from the first write to the
    # last, the folder may hold files of two runs, and report.json says so.
    markdown = render_markdown(results, analysis, command=command)
    png = plot_passk_majk(results, analysis["intervals"], bootstrap=analysis["bootstrap"])
    pairs = _accuracy_pairs(results, analysis["comparisons"])
    scatter = plot_problem_accuracy(pairs) if pairs else None
    atomic_write_text(out / REPORT_JSON, json_text(payload))
    paths = {"md": atomic_write_text(out / REPORT_MD, markdown), "png": atomic_write_bytes(out / REPORT_PNG, png)}
    if scatter is not None:
        paths["scatter"] = atomic_write_bytes(out / SCATTER_PNG, scatter)
    else:
        (out / SCATTER_PNG).unlink(missing_ok=True)  # an earlier run's: not this report's
    paths["json"] = atomic_write_text(out / REPORT_JSON, json_text({**payload, "complete": True}))
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


def _report_file(path: str | os.PathLike) -> tuple[Path, object]:
    """``(file, parsed JSON)`` of a report folder (its report.json) or a JSON file; errors name the file, and a
    report.json marked ``"complete": false`` is one (a ``UserError``)."""
    given = Path(path)
    file = given / REPORT_JSON if given.is_dir() else given
    if not file.is_file():
        where = f"no {REPORT_JSON} in {given}" if given.is_dir() else f"no such file: {given}"
        raise FileNotFoundError(f"eval report: {where}")
    try:
        payload = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"eval report {file}: not valid JSON ({err})") from err
    if isinstance(payload, dict) and payload.get("complete", True) is not True:
        raise UserError(
            f'eval report {file}: incomplete ("complete": {json.dumps(payload["complete"])}): writing the report '
            "stopped part-way (a full disk?), so its folder may mix files of two runs; run the evaluation again"
        )
    return file, payload


def read_comparisons(path: str | os.PathLike) -> list[dict]:
    """The model comparisons (B against A) of a report folder or ``report.json``, as :func:`write_reports` wrote
    them; ``[]`` for a report with one model, or one written before comparisons existed."""
    file, payload = _report_file(path)
    comparisons = payload.get("comparisons", []) if isinstance(payload, dict) else []
    if not isinstance(comparisons, list) or not all(isinstance(c, dict) for c in comparisons):
        raise ValueError(f"eval report {file}: 'comparisons' must be a list of objects")
    return comparisons


def read_report(path: str | os.PathLike, model: str | None = None, *, require: Iterable[str] = ()) -> dict:
    """One model's result from what :func:`write_reports` wrote, in the shape ``evaluate_model`` returned it.

    ``path`` is a report folder (its ``report.json``), a ``report.json`` (its ``models`` list) or a JSON file holding
    one result. With several models, ``model`` picks one: its name or the last part of its path. A result without
    ``task`` / ``task_id`` takes the report's ``task``, and one without ``params_key`` gets it from ``params``
    (results written before those keys existed stay readable). ``pass@k`` / ``maj@k`` are checked (see
    :func:`metric_table`; their ks stay strings, as written) and at least one must be there; ``require`` names
    further keys the caller needs. Errors are ``FileNotFoundError`` / ``ValueError`` naming the file (a
    ``UserError`` for a report that :func:`write_reports` did not finish writing).
    """
    file, payload = _report_file(path)
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
