"""What RL changed on the real model: the failure anatomy (format against arithmetic) of the base and the pick.

    python scripts/real_failures.py --search results/real_search [--harder-limit 200 --harder-n 16]

Reads the search's test samples (``<search>/test/samples.jsonl``, from ``scripts/search.py --test``), scores the base
and the pick on a harder split with the harness (three operands; ``<search>/harder/``, resumable through its sample
cache), classifies every sample (`grpo_ext.evaluation.failures`) and writes ``<search>/failures.json`` and
``failures.md``.
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
    from transformers import AutoTokenizer

    from evals.passk_majk import main as harness
    from grpo_ext.errors import UserError, user_file
    from grpo_ext.evaluation.failures import anatomy_markdown
    from grpo_ext.io import atomic_write_json, atomic_write_text
    from grpo_ext.models import resolve_model_path
    from grpo_ext.tasks import get_task

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--search", required=True, help="the output folder of scripts/search.py --test")
    parser.add_argument("--harder-limit", type=int, default=200, help="harder-split problems (default: 200)")
    parser.add_argument("--harder-n", type=int, default=16, help="samples per harder problem (default: 16)")
    args = parser.parse_args(argv)

    search = Path(args.search)
    with user_file(search / "search.json", "--search"):
        record = json.loads((search / "search.json").read_text())
    if "test" not in record:
        raise UserError(f"{search / 'search.json'}: no test result yet (run scripts/search.py with --test first)")
    config = record["config"]
    import yaml

    task_kwargs = (yaml.safe_load(Path(config).read_text()) or {}).get("task_kwargs") or {}
    base, pick = record["base"], str(search / "runs" / record["pick"]["slug"] / "model")
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(base))
    task = get_task("word_arithmetic", **task_kwargs)
    out = {
        "test": classify(search / "test" / "samples.jsonl", search / "test" / "report.json", task, "test", tokenizer)
    }

    harder_kwargs = {**task_kwargs, **HARDER}
    harder_dir = search / "harder"
    harness(
        ["--model", base, "--model", pick, "--task", "word_arithmetic", "--task-kwargs", json.dumps(harder_kwargs)]
        + ["--split", "test", "--limit", str(args.harder_limit), "--n", str(args.harder_n), "--no-progress"]
        + ["--out", str(harder_dir)]
    )
    harder_task = get_task("word_arithmetic", **harder_kwargs)
    out["harder"] = classify(harder_dir / "samples.jsonl", harder_dir / "report.json", harder_task, "test", tokenizer)
    out["labels"] = {base: "base", pick: f"pick ({record['pick']['slug']})"}
    atomic_write_json(search / "failures.json", out)
    lines = ["# Failure anatomy: base against the RL pick", ""]
    for part, title in (("test", "test split (2 operands)"), ("harder", "harder split (3 operands)")):
        lines += [f"## {title}", "", *anatomy_markdown({out["labels"][m]: a for m, a in out[part].items()}), ""]
    atomic_write_text(search / "failures.md", "\n".join(lines))
    print("\n".join(lines))
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
