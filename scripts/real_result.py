"""What RL changed in the real-model result, after ``scripts/search.py ... --test --test-limit 500 --test-n 64``
has picked a setting on validation and scored the pick against the base on test (``<search>/test/``).

    python scripts/real_result.py --search results/real_search

1. The same two models on a harder split (three operands; ``<search>/harder/``).
2. The failure anatomy of every sample of both splits (`grpo_ext.evaluation.failures`: truncated / no answer / wrong
   arithmetic / wrong with right steps): ``<search>/failures.json`` and ``failures.md``.

Resumable: the harness keeps every sample drawn (``samples.jsonl``) and draws only the missing ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HARDER = {"min_operands": 3, "max_operands": 3}


def classify(samples: Path, report: Path, task, split: str, tokenizer) -> dict[str, dict]:
    """:func:`grpo_ext.evaluation.failures.anatomy` of each model's samples in a harness output folder."""
    from grpo_ext.errors import UserError, user_file
    from grpo_ext.evaluation.failures import anatomy, failure_kind

    with user_file(report, "--search"):
        models = json.loads(report.read_text())["models"]
    max_new_tokens = {m["model"]: m["params"]["max_new_tokens"] for m in models}
    n_problems = models[0]["n_problems"]
    answers = {json.dumps(r["prompt"]): r["answer"] for r in task.load(split, n_problems)}
    kinds: dict[str, list[str]] = {name: [] for name in max_new_tokens}
    with user_file(samples, "--search"), samples.open() as lines:
        for line in lines:
            record = json.loads(line)
            key = json.dumps(record["prompt"])
            if record["model"] not in kinds or key not in answers:
                continue
            completion = record["completion"]
            n_tokens = len(tokenizer(completion, add_special_tokens=False)["input_ids"])
            kind = failure_kind(
                task, record["prompt"], completion, answers[key], n_tokens, max_new_tokens[record["model"]]
            )
            kinds[record["model"]].append(kind)
    if not any(kinds.values()):
        raise UserError(f"{samples}: no samples of {sorted(kinds)} for these problems")
    return {name: anatomy(k) for name, k in kinds.items()}


def main(argv: list[str]) -> dict:
    import yaml
    from transformers import AutoTokenizer

    from evals.passk_majk import main as harness
    from grpo_ext.errors import UserError, user_file
    from grpo_ext.evaluation.failures import anatomy_markdown
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
    for part, title in (("test", "test split (2 operands)"), ("harder", "harder split (3 operands)")):
        lines += [f"## {title}", "", *anatomy_markdown({out["labels"][m]: a for m, a in out[part].items()}), ""]
    atomic_write_text(search / "failures.md", "\n".join(lines))
    print("\n".join(lines))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
