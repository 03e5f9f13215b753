"""What RL changed in the real-model result, after ``scripts/search.py ... --test --test-limit 500 --test-n 64``
has picked a setting on validation and scored the pick against the base on test (``<search>/test/``).

    python scripts/real_result.py --search results/real_search

1. The same two models on a harder split (three operands; ``<search>/harder/``).
2. The failure anatomy of every sample of both splits, content first (`grpo_ext.evaluation.failures`: right / wrong
   arithmetic / wrong plan / no number / unfinished, and the strict answer form as a column of its own), per model and
   per slice of the problems (operation, carry or borrow): ``<search>/failures.json`` and ``failures.md``. Read from
   the per-problem ``anatomy`` records of the harness's report.json where it has them, else from ``samples.jsonl``.

Resumable: the harness keeps every sample drawn (``samples.jsonl``) and draws only the missing ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARDER = {"min_operands": 3, "max_operands": 3}


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


def main(argv: list[str]) -> dict:
    import yaml
    from transformers import AutoTokenizer

    from evals.passk_majk import main as harness
    from grpo_ext.errors import UserError, user_file
    from grpo_ext.evaluation.failures import anatomy_legend, anatomy_markdown
    from grpo_ext.io import atomic_write_json, atomic_write_text
    from grpo_ext.models import resolve_model_path
    from grpo_ext.tasks import get_task

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--search", required=True, help="the output folder of scripts/search.py")
    parser.add_argument("--harder-limit", type=int, default=200, help="harder-split problems (default: 200)")
    parser.add_argument("--harder-n", type=int, default=16, help="samples per harder problem (default: 16)")
    args = parser.parse_args(argv)

    search = Path(args.search)
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
    for part, title in (("test", "test split (2 operands)"), ("harder", "harder split (3 operands)")):
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
