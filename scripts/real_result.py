"""What RL changed in the real-model result, after ``scripts/search.py ... --test --test-limit 500 --test-n 64``
has picked a setting on validation and scored the pick against the base on test (``<search>/test/``).

    python scripts/real_result.py --search results/real_search

1. The same two models on a harder split (three operands; ``<search>/harder/``).
2. The failure anatomy of every sample of both splits, content first (`grpo_ext.evaluation.failures`: right / wrong
   arithmetic / wrong plan / no number / unfinished, and the strict answer form as a column of its own), per model and
   per slice of the problems (operation, carry or borrow): ``<search>/failures.json`` and ``failures.md``. Read from
   the per-problem ``anatomy`` records of the harness's report.json where it has them, else from ``samples.jsonl``.

Resumable: the harness keeps every sample drawn (``samples.jsonl``) and draws only the missing ones.

    python scripts/real_result.py --search results/real_search --from-reports

When the samples are gone (``samples.jsonl`` is not committed): ``<search>/test/`` and ``<search>/harder/`` are
re-rendered from their committed ``report.json`` alone, with the report of today (slices read from each problem's
prompt, B against A per slice, what moved with each problem's question), under their original command; nothing is
sampled (a committed ``samples_excerpt.jsonl`` is kept). The strict answer form, the failure anatomy and the excerpt
are read from each sample's text: where the committed files lack them, those reports and ``failures.md`` /
``failures.json`` say so, rather than give numbers.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARDER = {"min_operands": 3, "max_operands": 3}
PARTS = {"test": "test split (2 operands)", "harder": "harder split (3 operands)"}
#: How to have every number again: the samples drawn anew.
DRAW_AGAIN = "draw the samples again (scripts/search.py --test, then scripts/real_result.py without --from-reports)"
#: What a report shows only with its samples' text, by the key that holds it: in words.
NEEDS_SAMPLES = {
    "strict_accuracy": "strict answer form (strict pass@1, strict share)",
    "anatomy": "failure anatomy (right / wrong arithmetic / wrong plan / no number / unfinished)",
    "excerpt": "samples excerpt",
}
#: report.json keys that write_reports writes itself; any other top-level key of a committed report is kept.
_WRITTEN = frozenset(["complete", "task", "command", "notes", "bootstrap", "slices", "models", "comparisons"])
_WRITTEN |= {"paired_slices", "moved"}


def problem_anatomies(samples: Path, report: Path, task, split: str, tokenizer) -> dict[str, list[dict]]:
    """Per model of a harness output folder, one ``{"anatomy": counts, "attributes": slices}`` per problem: the
    report's own per-problem ``anatomy`` records where it has them, else each sample of ``samples`` classified here
    (:func:`grpo_ext.evaluation.failures.anatomy_counts`; whether a sample hit the budget is read by re-tokenising
    its text, which the sampler stored without its end-of-sequence token)."""
    from grpo_ext.errors import UserError, user_file
    from grpo_ext.evaluation.failures import anatomy_counts

    with user_file(report, "--search"):
        models = json.loads(report.read_text())["models"]
    rows = {json.dumps(r["prompt"]): r for r in task.load(split, models[0]["n_problems"])}

    def attributes(record: dict) -> dict:
        row = rows.get(json.dumps(record["prompt"]))
        return record.get("attributes") or (task.problem_attributes(row) if row is not None else {})

    out: dict[str, list[dict]] = {}
    for m in models:
        per_problem = m.get("per_problem") or []
        if per_problem and all("anatomy" in p for p in per_problem):
            out[m["model"]] = [{"anatomy": p["anatomy"], "attributes": attributes(p)} for p in per_problem]
    todo = {m["model"]: m["params"]["max_new_tokens"] for m in models if m["model"] not in out}
    if not todo:
        return out
    completions: dict[str, dict[str, list[str]]] = {name: {} for name in todo}
    with user_file(samples, "--search"), samples.open() as lines:
        for line in lines:
            record = json.loads(line)
            key = json.dumps(record["prompt"])
            if record["model"] in todo and key in rows:
                completions[record["model"]].setdefault(key, []).append(record["completion"])
    for name, by_problem in completions.items():
        if not by_problem:
            raise UserError(f"{samples}: no samples of {name} for these problems")
        out[name] = []
        for key, texts in by_problem.items():
            row = rows[key]
            lengths = tokenizer(texts, add_special_tokens=False)["input_ids"]
            hit_budget = [len(ids) >= todo[name] for ids in lengths]
            counts = anatomy_counts(task, row["prompt"], texts, row["answer"], hit_budget)
            out[name].append({"anatomy": counts, "attributes": task.problem_attributes(row)})
    return out


def classify(samples: Path, report: Path, task, split: str, tokenizer) -> dict[str, dict]:
    """Per model: ``all``, the :func:`grpo_ext.evaluation.failures.summarize_anatomy` of its problems (see
    :func:`problem_anatomies`), and ``by``: ``{attribute: {value: summary}}`` for each problem attribute that takes
    more than one value here (``operation``: ``+`` / ``-`` / ``mixed``; ``carry_borrow``...)."""
    from grpo_ext.evaluation.failures import summarize_anatomy

    out = {}
    for name, problems in problem_anatomies(samples, report, task, split, tokenizer).items():
        by: dict[str, dict[str, list[dict]]] = {}
        for p in problems:
            for attribute, value in p["attributes"].items():
                by.setdefault(attribute, {}).setdefault(str(value), []).append(p["anatomy"])
        out[name] = {
            "all": summarize_anatomy(p["anatomy"] for p in problems),
            "by": {
                attribute: {value: summarize_anatomy(values[value]) for value in sorted(values)}
                for attribute, values in by.items()
                if len(values) > 1  # one value: the same numbers as "all"
            },
        }
    return out


def _excerpts(folder: Path) -> dict[str, list[dict]]:
    """A committed samples excerpt's rows by model (without ``model``), so that writing the report again keeps it."""
    path = folder / "samples_excerpt.jsonl"
    rows: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        row = json.loads(line)
        rows.setdefault(row.pop("model"), []).append(row)
    return rows


def rerender(folder: Path, rerender_command: str) -> list[str]:
    """Re-render a harness output folder from its ``report.json`` (and ``samples_excerpt.jsonl``, where committed)
    alone: each model's result with its problems' attributes read from their prompts by the task of the report's own
    command (:func:`grpo_ext.evaluation.slices.with_attributes`), written again under that command with the same
    bootstrap (:func:`grpo_ext.evaluation.report.write_reports`), and a note of what the report cannot show without
    its samples (the strict form, the anatomy, the excerpt: whichever the committed files lack). Returns their keys
    (of :data:`NEEDS_SAMPLES`)."""
    from grpo_ext.errors import UserError, user_file
    from grpo_ext.evaluation.analysis import BootstrapSettings
    from grpo_ext.evaluation.cli import harness_settings
    from grpo_ext.evaluation.passk_majk import build_parser
    from grpo_ext.evaluation.report import read_report, write_reports
    from grpo_ext.evaluation.slices import with_attributes

    report = folder / "report.json"
    with user_file(report, "--search"):
        payload = json.loads(report.read_text())
    words = shlex.split(payload.get("command") or "")
    script = next((i for i, word in enumerate(words) if word.endswith("passk_majk.py")), None)
    if script is None:
        raise UserError(f"{report}: its command is not an evals/passk_majk.py command, so its task is unknown")
    task = harness_settings(build_parser().parse_args(words[script + 1 :])).task  # the task it was scored on
    excerpts = _excerpts(folder)
    results = [
        {**with_attributes(read_report(folder, m["model"]), task), "excerpt": excerpts.get(m["model"], [])}
        for m in payload["models"]
    ]
    shown = {"strict_accuracy": bool(task.strict_form), "anatomy": task.has_step_verifier, "excerpt": True}
    gone = [key for key in NEEDS_SAMPLES if shown[key] and any(r.get(key) in (None, []) for r in results)]
    note = f"Re-rendered from this folder's committed report.json (`{rerender_command}`): nothing was sampled."
    if gone:
        note += (
            f" The samples behind it were not kept (samples.jsonl is not committed), so it has no "
            f"{', no '.join(NEEDS_SAMPLES[key] for key in gone)}"
            f": each is read from the samples' text, and none is made up here. To have them, {DRAW_AGAIN}."
        )
    if any("top_answers" not in p for r in results for p in r["per_problem"]):
        note += " What moved lists each model's most frequent answer without its count (the report kept no more)."
    drawn = payload.get("bootstrap") or {}
    threshold = {c["solved_threshold"] for c in payload.get("comparisons") or [] if "solved_threshold" in c}
    write_reports(
        results,
        folder,
        command=payload["command"],
        extra={k: v for k, v in payload.items() if k not in _WRITTEN},
        bootstrap=BootstrapSettings(**{k: drawn[k] for k in ("n_resamples", "seed", "confidence") if k in drawn}),
        by=task.slice_attributes,
        notes=[note],
        **({"solved_threshold": threshold.pop()} if len(threshold) == 1 else {}),
    )
    return gone


def from_reports(search: Path) -> dict:
    """``--from-reports``: the test and harder reports re-rendered (:func:`rerender`), and ``failures.json`` /
    ``failures.md`` saying, part by part, where the anatomy is (the re-rendered report's own section, when the
    committed records hold it) or that it needs the samples: no numbers of their own."""
    from grpo_ext.errors import UserError
    from grpo_ext.io import atomic_write_json, atomic_write_text

    command = f"python scripts/real_result.py --search {search} --from-reports"
    parts = [part for part in PARTS if (search / part / "report.json").is_file()]
    if not parts:
        raise UserError(f"--search {search}: no report.json in {search / 'test'} or {search / 'harder'}")
    out: dict = {"from_reports": True, "command": command, "parts": {}}
    lines = ["# Failure anatomy: base against the RL pick", ""]
    for part in parts:
        report = str(search / part / "report.md")
        gone = rerender(search / part, command)
        if "anatomy" in gone:
            text = (
                f"**Not computed.** The {NEEDS_SAMPLES['anatomy']} and the strict answer form are read from each "
                "sample's text, and the samples behind this split's report were not kept (samples.jsonl is not "
                f"committed): no number is given here rather than one made up. To have them, {DRAW_AGAIN}. What its "
                f"per-problem records hold (every metric per slice, B against A per slice, what moved with each "
                f"problem's question and top answer) is in `{report}`, re-rendered from them (`{command}`)."
            )
        else:
            text = f'In its report\'s section "Failure anatomy (content first)": `{report}` (`{command}`).'
        out["parts"][part] = {"report": report, "anatomy": "anatomy" not in gone, "not_shown": gone}
        lines += [f"## {PARTS[part]}", "", text, ""]
    atomic_write_json(search / "failures.json", out)
    atomic_write_text(search / "failures.md", "\n".join(lines))
    print("\n".join(lines))
    return out


def main(argv: list[str]) -> dict:
    import yaml
    from transformers import AutoTokenizer

    from grpo_ext.errors import UserError, user_file
    from grpo_ext.evaluation.cli import HarnessArgumentParser  # a bad flag is one line, exit 2
    from grpo_ext.evaluation.failures import anatomy_legend, anatomy_markdown
    from grpo_ext.evaluation.passk_majk import main as harness
    from grpo_ext.io import atomic_write_json, atomic_write_text
    from grpo_ext.model_paths import resolve_model_path
    from grpo_ext.tasks import get_task

    parser = HarnessArgumentParser(prog="real_result.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--search", required=True, help="the output folder of scripts/search.py")
    parser.add_argument("--harder-limit", type=int, default=200, help="harder-split problems (default: 200)")
    parser.add_argument("--harder-n", type=int, default=16, help="samples per harder problem (default: 16)")
    parser.add_argument(
        "--from-reports",
        action="store_true",
        help="the samples are gone: re-render <search>/test and <search>/harder from their report.json (slices, what "
        "moved), sample nothing, and say that the anatomy and the strict form need the samples",
    )
    args = parser.parse_args(argv)

    search = Path(args.search)
    if args.from_reports:
        return from_reports(search)
    with user_file(search / "search.json", "--search"):
        record = json.loads((search / "search.json").read_text())
    if "test" not in record:  # the test of the pick is search.py's (--test): its samples are classified here
        raise UserError(f"{search / 'search.json'}: the pick was not tested (run scripts/search.py with --test first)")
    with user_file(record["config"], "search.json config"):
        task_kwargs = (yaml.safe_load(Path(record["config"]).read_text()) or {}).get("task_kwargs") or {}
    with user_file(search / "test" / "report.json", "--search"):  # the names the test's samples carry
        base, pick = (m["model"] for m in json.loads((search / "test" / "report.json").read_text())["models"])
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(base))
    out: dict = {"labels": {base: "base", pick: f"pick ({record['pick']['slug']})"}}
    harder = {**task_kwargs, **HARDER}
    harness(
        ["--model", base, "--model", pick, "--task", "word_arithmetic", "--task-kwargs", json.dumps(harder)]
        + ["--split", "test", "--limit", str(args.harder_limit), "--n", str(args.harder_n), "--no-progress"]
        + ["--out", str(search / "harder")]
    )
    for part, kwargs in (("test", task_kwargs), ("harder", harder)):
        task, folder = get_task("word_arithmetic", **kwargs), search / part
        out[part] = classify(folder / "samples.jsonl", folder / "report.json", task, "test", tokenizer)
    atomic_write_json(search / "failures.json", out)
    lines = ["# Failure anatomy: base against the RL pick", ""]
    lines += [f"Pass@K of the same samples: `{search}/test/report.md`, `{search}/harder/report.md`.", ""]
    lines += [*anatomy_legend(task.strict_form, task.has_step_verifier), ""]
    for part, title in PARTS.items():
        rows = out[part]
        lines += [f"## {title}", "", *anatomy_markdown({out["labels"][m]: r["all"] for m, r in rows.items()}), ""]
        for attribute in dict.fromkeys(a for r in rows.values() for a in r["by"]):
            by_value = {
                f"{out['labels'][m]}: {value}": summary
                for m, r in rows.items()
                for value, summary in r["by"].get(attribute, {}).items()
            }
            lines += [f"### by {attribute}", "", *anatomy_markdown(by_value, f"model: {attribute}"), ""]
    atomic_write_text(search / "failures.md", "\n".join(lines))
    print("\n".join(lines))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
