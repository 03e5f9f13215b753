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

``report.json``: ``{"complete", "task", "command", "notes" (where given), ..., "bootstrap": {"n_resamples", "seed",
"confidence", "method", "unit"}, "slices": {"by", "min_problems"}, "models": [each result, plus "intervals": {metric:
{key: [low, high]}}, "slices" (:mod:`~grpo_ext.evaluation.slices`)], "comparisons": [{"a", "b", "difference",
"solved_overlap", "crossover", ...}], "paired_slices": [{"a", "b", "slices"}], "moved": [{"a", "b", "top", "up",
"down"}] (:mod:`~grpo_ext.evaluation.moved`)}``: one entry of ``paired_slices`` and ``moved`` per comparison. Each
per-problem record sits on one line. A result holds ``strict_accuracy`` / ``strict_share`` (the strict answer form:
registry metrics), ``anatomy`` (summed counts, tasks with a step verifier), ``anatomy_budget`` and ``strict_form``;
its records ``attributes``, ``n_strict``, ``n_correct_strict``, ``top_answers`` and ``anatomy``. Every reader copes
with a report written before those keys. The samples behind it are excerpted in ``samples_excerpt.jsonl``
(:mod:`~grpo_ext.evaluation.excerpt`).

The Markdown is :mod:`grpo_ext.evaluation.report_md`'s (``render_markdown`` and ``crossover_text`` are re-exported
here).
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
from grpo_ext.evaluation.excerpt import write_excerpt
from grpo_ext.evaluation.moved import moved_problems
from grpo_ext.evaluation.plots import plot_passk_majk, plot_problem_accuracy
from grpo_ext.evaluation.registry import headline_entries
from grpo_ext.evaluation.report_md import crossover_text, render_markdown
from grpo_ext.evaluation.slices import MIN_SLICE_PROBLEMS, comparison_slices, known_attributes, model_slices
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
    by: Sequence[str] | None = None,
    min_slice_problems: int = MIN_SLICE_PROBLEMS,
    notes: Sequence[str] = (),
) -> dict[str, Path]:
    """Write ``report.md``, ``report.json``, ``passk_majk.png``, (two or more comparable models)
    ``per_problem_accuracy.png`` and (results fresh from ``evaluate_model``) ``samples_excerpt.jsonl`` into
    ``out_dir``; returns their paths. ``bootstrap`` draws every interval (recorded in the report); a model *solves* a
    problem at k when its pass@k is >= ``solved_threshold``. ``by``: the attributes to slice by
    (:mod:`~grpo_ext.evaluation.slices`; None: every attribute the problems carry, ``()``: no slices); a slice of fewer
    than ``min_slice_problems`` problems gets no interval. ``notes``: what a reader must know first (e.g. that a report
    was re-rendered without its samples), under the command in report.md and as ``"notes"`` in report.json.

    ``report.json`` is written first marked ``"complete": false`` and last marked ``"complete": true`` (see the
    module's docstring); a ``per_problem_accuracy.png`` of an earlier run that this report has no pairs for is
    removed. A model that is a local path is named as :func:`~grpo_ext.io.portable_path` gives it."""
    if not results:
        raise ValueError("no results to report")
    results = [{**r, "model": portable_path(r["model"])} for r in results]
    analysis = analyze(results, bootstrap, solved_threshold)
    by = known_attributes(results) if by is None else list(by)
    if by:  # a result written before problems had attributes gets no slices
        results = [
            {**r, "slices": model_slices(r, by, bootstrap, min_slice_problems)} if known_attributes([r]) else r
            for r in results
        ]
    # what each comparison adds beyond the whole set, in lists of their own: a comparison stays compare_models'
    paired = [
        {
            "a": c["a"],
            "b": c["b"],
            "moved": moved_problems(results[0], b),
            "slices": comparison_slices(results[0], b, by, bootstrap, min_slice_problems)
            if by and known_attributes([results[0]])
            else {},
        }
        for c, b in zip(analysis["comparisons"], results[1:], strict=True)
        if c is not None
    ]
    out = Path(out_dir)
    # the excerpt has its own file (samples_excerpt.jsonl): report.json keeps numbers
    models = [
        {**{k: v for k, v in r.items() if k != "excerpt"}, "intervals": iv}
        for r, iv in zip(results, analysis["intervals"], strict=True)
    ]
    payload = {
        "complete": False,
        "task": results[0]["task_id"],
        "command": command,
        **({"notes": list(notes)} if notes else {}),
        **(extra or {}),
        "bootstrap": analysis["bootstrap"],
        "slices": {"by": by, "min_problems": min_slice_problems},
        "models": models,
        "comparisons": [c for c in analysis["comparisons"] if c is not None],
        "paired_slices": [{"a": p["a"], "b": p["b"], "slices": p["slices"]} for p in paired],
        "moved": [{"a": p["a"], "b": p["b"], **p["moved"]} for p in paired],
    }
    # Everything is rendered before the first write, so only a write can stop part-way; from the first write to the
    # last, the folder may hold files of two runs, and report.json says so.
    markdown = render_markdown(
        results, analysis, command=command, paired=paired, min_slice_problems=min_slice_problems, notes=notes
    )
    png = plot_passk_majk(results, analysis["intervals"], bootstrap=analysis["bootstrap"])
    pairs = _accuracy_pairs(results, analysis["comparisons"])
    scatter = plot_problem_accuracy(pairs) if pairs else None
    atomic_write_text(out / REPORT_JSON, json_text(payload))
    paths = {"md": atomic_write_text(out / REPORT_MD, markdown), "png": atomic_write_bytes(out / REPORT_PNG, png)}
    if scatter is not None:
        paths["scatter"] = atomic_write_bytes(out / SCATTER_PNG, scatter)
    else:
        (out / SCATTER_PNG).unlink(missing_ok=True)  # an earlier run's: not this report's
    excerpt = write_excerpt(results, out)
    if excerpt is not None:
        paths["excerpt"] = excerpt
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
    headline = [m.name for m in headline_entries()]  # a result holds at least one of them
    if isinstance(payload, dict) and "models" not in payload and any(name in payload for name in headline):
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
    if not any(metric_table(result, name, where) for name in headline):
        raise ValueError(f"{where}: no {' or '.join(repr(name) for name in headline)} results")
    if not result["task"]:
        raise ValueError(f"{where}: no 'task'")
    missing = [key for key in require if key not in result]
    if missing:
        raise ValueError(f"{where}: not an evaluation result (missing {', '.join(missing)})")
    params = result.get("params")
    if "params_key" not in result and isinstance(params, dict) and all(name in params for name in _KEY_FIELDS):
        result["params_key"] = _params_key(params, where)
    return result


_KEY_FIELDS = ("temperature", "top_p", "max_new_tokens", "seed")  # what SamplingParams.key() names, with stop


def _params_key(params: dict, where: str) -> str:
    from grpo_ext.sampler.sampling import SamplingParams  # imports torch: only for results that lack the key

    try:
        # n stays 1: the key leaves n out, and a greedy result's n must be 1 for SamplingParams anyway; the stop
        # strings are in the key (a result drawn with them is another distribution), absent before they existed
        fields = {name: params[name] for name in _KEY_FIELDS}
        return SamplingParams(**fields, stop=params.get("stop") or ()).key()
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: bad 'params' ({err})") from None
