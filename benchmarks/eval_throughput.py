"""Samples per second of our transformers sampling backend against lm-eval's HF backend (HFLM), side by side.

    python -m benchmarks.eval_throughput [--prompts 64] [--n 16] [--batch 64,128,256] [--max-tokens 64] [--reps 5]

Same model object (the embedded model, float32, one thread), same task (`grpo_ext_arithmetic`, its test prompts
exactly as lm-eval renders them), same n (`repeats` in lm-eval, `SamplingParams.n` for us), same maximum new
tokens, temperature 1.0 / top_p 1.0 / no top-k, and the same batch size counted in sequences a forward pass holds
(lm-eval's `batch_size` rows; ours `batch_size * n` decoding slots), for each batch size of `--batch`. Model
loading, lm-eval's task building and request construction are done once, outside the timing. Timed: lm-eval's
`HFLM.generate_until(requests x repeats)` against our harness's `evaluate_model` (no cache) over
`TransformersBackend` (it orders and batches the prompts, samples, decodes and also scores: a few ms). Both sides'
mean accuracy and completion length are reported, to show they sample the same distribution, and how many distinct
prefixes the samples had (our sampler decodes each once: `grpo_ext/sampler/continuous.py`).

Target: ours >= 1.5x lm-eval (median of per-repetition ratios), at every batch size.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import torch

from benchmarks import _common
from grpo_ext.evaluation.backends import TransformersBackend
from grpo_ext.evaluation.harness import evaluate_model
from grpo_ext.sampler.sampling import SamplingParams
from grpo_ext.tasks.arithmetic import ArithmeticTask

TARGET = 1.5
TASK = "grpo_ext_arithmetic"


def lm_eval_requests(n_prompts: int, repeats: int, max_tokens: int):
    """lm-eval's instances for our task (each cloned `repeats` times, as lm-eval's evaluator does) + the docs."""
    from lm_eval.tasks import TaskManager, get_task_dict

    manager = TaskManager(include_path=[str(_common.ROOT / "evals" / "lm_eval_tasks")], metadata={"n": n_prompts})
    task = get_task_dict([TASK], manager)[TASK]
    task.set_config("repeats", repeats)
    task.set_config("generation_kwargs", {**task.config.generation_kwargs, "max_gen_toks": max_tokens})
    task.build_all_requests(limit=n_prompts, rank=0, world_size=1)
    requests = []
    for instance in task.instances:
        requests.extend([instance] * instance.repeats)
    return requests, [instance.doc for instance in task.instances], task.config.generation_kwargs


class _Recording:
    """Wraps a backend and keeps what it returned (the harness hands back scores, not completions)."""

    def __init__(self, backend):
        self.backend, self.outputs = backend, []  # (prompt, its completions), in the order the harness asked
        self.name, self.fingerprint, self.backend_name = backend.name, backend.fingerprint, backend.backend_name

    def generate_stream(self, prompts, params, *, progress=False):
        for j, completions in self.backend.generate_stream(prompts, params, progress=progress):
            self.outputs.append((prompts[j], completions))
            yield j, completions


def prefix_sharing(tokenizer, pairs) -> dict:
    """Sampled tokens (EOS included) against distinct (prompt, prefix) pairs: our sampler decodes each distinct
    prefix once, so their ratio bounds what sharing saves over decoding every sample separately."""
    by_prompt: dict[str, list[tuple[int, ...]]] = {}
    for prompt, completion in pairs:
        ids = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        by_prompt.setdefault(prompt, []).append(tuple(ids))
    tokens = sum(len(ids) for samples in by_prompt.values() for ids in samples)
    prefixes = sum(len({ids[: t + 1] for ids in samples for t in range(len(ids))}) for samples in by_prompt.values())
    return {"sampled_tokens": tokens, "distinct_prefixes": prefixes}


def measure(model, tokenizer, rows: int, args, requests, problems, load_cell_fn) -> dict:
    """One batch size: ours (through the harness, no cache) and lm-eval alternated `args.reps` times."""
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=rows, device="cpu")
    backend = _Recording(TransformersBackend(model, tokenizer, name="embedded"))
    params = SamplingParams(
        n=args.n, temperature=1.0, top_p=1.0, max_new_tokens=args.max_tokens, batch_size=rows // args.n
    )
    task = ArithmeticTask()
    answers = {p["prompt"]: p["answer"] for p in problems}
    quality: dict[str, list[dict]] = {"ours": [], "lm_eval": []}

    def score(pairs) -> dict:
        return {
            "accuracy": sum(task.is_correct(c, answers[p]) for p, c in pairs) / len(pairs),
            "mean_chars": sum(len(c) for _, c in pairs) / len(pairs),
            **prefix_sharing(tokenizer, pairs),
        }

    def ours(r: int) -> None:
        backend.outputs = []
        evaluate_model(backend, task, params.replace(seed=1000 + r), ks=(1,), problems=problems, progress=False)
        if r >= 0:
            quality["ours"].append(score([(p, c) for p, cs in backend.outputs for c in cs]))

    def theirs(r: int) -> None:
        torch.manual_seed(1000 + r)
        flat = lm.generate_until(requests, disable_tqdm=True)
        if r >= 0:
            quality["lm_eval"].append(score([(req.args[0], c) for req, c in zip(requests, flat, strict=True)]))

    times = _common.alternate({"ours": ours, "lm_eval": theirs}, reps=args.reps, warmup=args.warmup)
    samples = len(requests)
    rates = {name: [samples / t for t in times[name]] for name in times}
    ratio = _common.paired_ratio(rates["ours"], rates["lm_eval"])
    return {
        "rows": rows,
        "prompts_per_batch_ours": rows // args.n,
        "seconds": {name: _common.summary(t) for name, t in times.items()},
        "samples_per_second": {name: _common.summary(r) for name, r in rates.items()},
        "ratio": ratio,
        "quality": {name: {k: sum(q[k] for q in qs) / len(qs) for k in qs[0]} for name, qs in quality.items()},
        "pass": ratio["median_of_ratios"] >= TARGET,
        "load_average": load_cell_fn(),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument(
        "--batch",
        default="64,128,256",
        help="sequences a batch, comma-separated (lm-eval batch_size = our prompts x n)",
    )
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--model", default=None, help="model folder (default: the embedded model)")
    parser.add_argument(
        "--fewshot",
        type=int,
        default=0,
        help="prepend this many solved training problems to every prompt, on both sides: long prompts "
        "(GSM8K-style few-shot), where prefilling once per prompt instead of n times matters",
    )
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batch.split(",")]
    if any(b % args.n for b in batches):
        parser.error("--batch values must be multiples of --n (our batches hold whole prompts x n rows)")
    _common.set_threads(1)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    load_start = _common.load_average()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = args.model or _common.model_dir()
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    requests, docs, gen_kwargs = lm_eval_requests(args.prompts, args.n, args.max_tokens)
    if args.fewshot:
        prefix = "".join(f"{row['prompt']}{row['solution']};" for row in ArithmeticTask().load("train", args.fewshot))
        for instance in {id(r): r for r in requests}.values():  # the same Instance is repeated n times
            instance.arguments = (prefix + instance.arguments[0], *instance.arguments[1:])
    assert len(requests) == args.prompts * args.n, (len(requests), args.prompts * args.n)
    assert gen_kwargs["temperature"] == 1.0 and gen_kwargs["top_p"] == 1.0 and gen_kwargs["top_k"] == 0
    # lm-eval's rendered contexts (doc_to_text), one per doc, as our harness's problems
    problems = [
        {"problem_id": str(i), "prompt": request.args[0], "answer": doc["answer"]}
        for i, (request, doc) in enumerate(zip(requests[:: args.n], docs, strict=True))
    ]

    results = []
    for rows in batches:
        print(f"batch {rows} sequences:", file=sys.stderr, flush=True)
        results.append(measure(model, tokenizer, rows, args, requests, problems, _common.load_average))
    samples = len(requests)

    table_rows = []
    for res in results:
        ours, theirs, ratio = res["samples_per_second"]["ours"], res["samples_per_second"]["lm_eval"], res["ratio"]
        table_rows.append(
            [
                f"{res['rows']} sequences a batch (ours {res['prompts_per_batch_ours']} prompts x {args.n}; lm-eval "
                f"batch_size {res['rows']})",
                f"{ours['median']:.0f} vs {theirs['median']:.0f} samples/s = **{ratio['median_of_ratios']:.2f}x** "
                f"(IQR {ratio['q1']:.2f}-{ratio['q3']:.2f})",
                f">= {TARGET}x",
                _common.verdict(res["pass"]),
                " / ".join(map(str, res["load_average"])),
            ]
        )
    table = _common.markdown_table(
        [
            f"ours / lm-eval samples per second (median of {args.reps} alternated runs)",
            "value",
            "target",
            "result",
            "load avg (1/5/15 min)",
        ],
        table_rows,
    )
    quality = results[-1]["quality"]
    shots = f" with {args.fewshot} solved examples prepended" if args.fewshot else ""
    table += (
        f"\n\n{args.prompts} test prompts{shots} x n={args.n} = {samples} samples a run, max {args.max_tokens} "
        f"new tokens, temperature 1.0, 1 thread; ours = the harness (`evaluate_model`, no cache) over "
        f"`TransformersBackend`, lm-eval = `HFLM.generate_until`. Same distribution: accuracy ours "
        f"{quality['ours']['accuracy']:.3f} vs lm-eval {quality['lm_eval']['accuracy']:.3f}, mean completion "
        f"{quality['ours']['mean_chars']:.1f} vs {quality['lm_eval']['mean_chars']:.1f} chars. Where the speed comes "
        f"from: continuous batching (a slot takes new work as soon as its sample ends), each prompt prefilled once for "
        f"its n samples, and samples that drew the same tokens sharing one row: ours drew "
        f"{quality['ours']['sampled_tokens']:.0f} tokens in {quality['ours']['distinct_prefixes']:.0f} distinct "
        f"prefixes ({quality['ours']['sampled_tokens'] / quality['ours']['distinct_prefixes']:.1f} tokens a prefix; "
        f"lm-eval's samples {quality['lm_eval']['sampled_tokens'] / quality['lm_eval']['distinct_prefixes']:.1f})"
    )
    payload = {
        "params": vars(args) | {"model": folder},
        "load_average_start": load_start,
        "samples_per_run": samples,
        "results": results,
        "target": f"ours / lm-eval >= {TARGET} at every batch size",
        "pass": all(res["pass"] for res in results),
    }
    _common.write_results("eval_throughput" + (f"_fewshot{args.fewshot}" if args.fewshot else ""), payload, table)
    return payload


def summary_rows() -> list[list]:
    """This benchmark's rows of the `run_all` summary (:func:`benchmarks._common.dated_rows`)."""

    def rows(r):
        for res in r["results"]:
            measure = f"samples/s ours / lm-eval HFLM, batch {res['rows']} sequences"
            value = f"{res['ratio']['median_of_ratios']:.2f}x"
            yield measure, value, ">= 1.5x", _common.verdict(res["pass"]), res["load_average"]

    def fewshot_rows(r):  # `--fewshot K`: long prompts, for information
        for res in r["results"]:
            measure = (
                f"same, {r['params']['fewshot']} solved problems prepended to every "
                f"prompt (long prompts; info), batch {res['rows']}"
            )
            yield measure, f"{res['ratio']['median_of_ratios']:.2f}x", "(info)", "", res["load_average"]

    found = _common.dated_rows(_common.load_result("eval_throughput"), rows)
    for path in sorted(_common.RESULTS_DIR.glob("eval_throughput_fewshot*.json")):
        found += _common.dated_rows(json.loads(path.read_text()), fewshot_rows)
    return found


if __name__ == "__main__":
    main()
