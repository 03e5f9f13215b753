"""The harness on the real model, before and after issue 37, and lm-eval's HF backend, side by side.

    python -m benchmarks.eval_real [--problems 40] [--n 16] [--reps 2] [--prompt study] [--sides before,after,lm_eval]

SmolLM2-135M-Instruct (`make real-model`), `word_arithmetic` test problems, n samples each, temperature 0.7, at most
64 new tokens, seed 0, one thread, three sides on the same prompts:

- **before**: the harness as the earlier real-model run used it (`results/real_search/test`: the base at n = 64 on
  500 test problems, ~4 core-hours): the transformers backend (our continuous sampler; `--backend auto` picks it
  on a CPU), the model in float32 (the harness's CPU default), no stop strings, the harness CLI's default batch
  (`min(8, 512 // n)` prompts).
- **after**: the harness as shipped for a CPU with native bf16 (`avx512_bf16` / `amx_bf16` / Arm `bf16`,
  `grpo_ext.policy_loading.cpu_bf16_support`; float32 elsewhere, recorded): the base in bfloat16, the task's stop
  strings (`Question:`: the sample ends at the token completing it), the continuous sampler with its bf16 decode
  attention (`grpo_ext/sampler/decode_attention.py`), `--after-batch` prompts a batch.
- **lm_eval**: lm-eval's `HFLM.generate_until` on the after side's model object (same dtype), the same prompt texts
  (our chat-template rendering; the token ids are checked equal to the sampler's), `until` = the task's stop strings,
  `do_sample`, the same temperature, top_p 1, top_k 0, `max_gen_toks`, `--lm-eval-batch` rows a batch (default: the
  after side's slots, `after_batch x n`) and `repeats` = n copies of each request, as lm-eval's evaluator makes them.

`--prompt study` (default) is the real-model study's stage (`configs/real/methods/*.yaml`: 2 operands of 2 digits,
two worked examples, additions and subtractions balanced); `--prompt cpu` is `configs/real/cpu.yaml`'s (one worked
example), the prompt of the earlier run.

Timing: the problems are cut into `--reps` consecutive chunks; repetition r runs every side on chunk r, in an order
rotated each repetition, after a warm-up of every side on `--warmup-problems` validation problems. Each side thus
draws every problem's n samples once (pass@1 over all of them), and each repetition gives a paired ratio. Samples per
CPU second of this process (one thread; what other jobs on shared cores inflate least) decide the target; wall
seconds are reported beside. Tokens a sample: the token ids a sample drew (EOS and a stop string's tokens included;
for lm-eval counted in the rows `generate` returned, up to the row's first EOS / pad, +-1 where a stop string ended
it), and lm-eval's decoded positions (a batch runs until its longest row ends). pass@1: mean over problems of c / n
with its 95% bootstrap interval over problems, and each side's paired difference to before.

Target (issue 37, deliverable 3): after / before >= 3x samples per second with pass@1 the same within noise (the
paired interval of the difference holds 0).
"""

from __future__ import annotations

import argparse
import logging
import sys

import torch

from benchmarks import _common
from benchmarks.stop_strings import CountingTokenizer
from grpo_ext.evaluation.backends import TransformersBackend, load_model_and_tokenizer
from grpo_ext.evaluation.bootstrap import bootstrap_mean_ci, bootstrap_paired_difference_ci
from grpo_ext.evaluation.harness import evaluate_model, load_problems
from grpo_ext.sampler.sampling import SamplingParams, encode_prompt_ids
from grpo_ext.tasks import get_task

MODEL = "smollm2-135m-instruct"
TARGET = 3.0
SIDES = ("before", "after", "lm_eval")
#: The task's knobs for each prompt: the study's stage (configs/real/methods/*.yaml) and configs/real/cpu.yaml's.
PROMPTS = {
    "study": {"min_operands": 2, "max_operands": 2, "digits": 2, "num_fewshot": 2, "balance_operations": True},
    "cpu": {"min_operands": 2, "max_operands": 2, "digits": 2, "num_fewshot": 1},
}


def after_dtype() -> tuple[torch.dtype, dict]:
    """bfloat16 where the CPU multiplies bf16 natively, float32 elsewhere (as `cpu_bf16: auto` decides for training)."""
    from grpo_ext.policy_loading import cpu_bf16_support

    support = cpu_bf16_support()
    return (torch.bfloat16 if support["supported"] else torch.float32), support


def lm_eval_side(model, tokenizer, checked: list, args, stop, rows: int):
    """`HFLM` on `model` and a function that samples a list of prompt texts (n repeats each) with it, keeping the
    rows `generate` returned (their token counts are read after the timing)."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=rows, device="cpu", max_length=4096)
    for prompt, text in checked:  # (prompt, its text): lm-eval feeds the token ids the sampler feeds
        assert lm.tok_encode(text) == encode_prompt_ids(tokenizer, [prompt])[0], "lm-eval's prompt ids differ"
    gen_kwargs = {
        "until": list(stop),
        "do_sample": True,
        "temperature": args.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "max_gen_toks": args.max_tokens,
    }
    generated: list[tuple[int, torch.Tensor]] = []  # (context width, rows returned) per batch
    original = lm._model_generate

    def keep(context, **kwargs):
        out = original(context, **kwargs)
        generated.append((context.shape[1], out))
        return out

    lm._model_generate = keep

    def run(texts: list[str], seed: int) -> list[list[str]]:
        requests = []
        for i, text in enumerate(texts):
            instance = Instance(
                "generate_until", doc={}, arguments=(text, gen_kwargs), idx=i, metadata=(None, i, args.n)
            )
            requests.extend([instance] * args.n)  # as lm-eval's evaluator clones them (`repeats`)
        torch.manual_seed(seed)
        flat = lm.generate_until(requests, disable_tqdm=True)
        return [flat[i * args.n : (i + 1) * args.n] for i in range(len(texts))]

    return run, generated


def lm_eval_tokens(generated, eos_ids: set[int]) -> tuple[int, int]:
    """(token ids drawn, positions decoded) of lm-eval's returned rows: a row drew up to its first EOS / pad token
    (included); a batch decoded every row up to its longest."""
    drawn = positions = 0
    for width, out in generated:
        new = out[:, width:]
        positions += new.numel()
        for row in new.tolist():
            end = next((i for i, t in enumerate(row) if t in eos_ids), None)
            drawn += len(row) if end is None else end + 1
    return drawn, positions


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=2, help="chunks of the problems, one a repetition")
    parser.add_argument("--warmup-problems", type=int, default=2, help="validation problems each side warms up on")
    parser.add_argument("--prompt", choices=sorted(PROMPTS), default="study")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, from {', '.join(SIDES)}")
    parser.add_argument("--before-batch", type=int, default=None, help="prompts a batch (default: min(8, 512 // n))")
    parser.add_argument("--after-batch", type=int, default=16, help="prompts a batch of the after side")
    parser.add_argument("--lm-eval-batch", type=int, default=None, help="rows a batch (default: after-batch x n)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--out-name", default="eval_real", help="results file name (benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if not sides or any(s not in SIDES for s in sides) or len(set(sides)) != len(sides):
        parser.error(f"--sides: distinct names from {', '.join(SIDES)}")
    if args.reps < 1 or args.problems < args.reps:
        parser.error("--reps must be >= 1 and <= --problems")
    _common.set_threads(1)
    logging.getLogger("grpo_ext").setLevel(logging.WARNING)
    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    load_start = _common.load_average()

    task = get_task("word_arithmetic", **PROMPTS[args.prompt])
    problems = load_problems(task, "test", args.problems)
    warm = load_problems(task, "validation", args.warmup_problems) if args.warmup_problems else []
    chunks = [problems[r * len(problems) // args.reps : (r + 1) * len(problems) // args.reps] for r in range(args.reps)]
    before_batch = args.before_batch or max(1, min(8, 512 // args.n))  # grpo_ext.evaluation.cli's default
    dtype, support = after_dtype()

    base = SamplingParams(n=args.n, temperature=args.temperature, max_new_tokens=args.max_tokens, seed=args.seed)
    models, tokenizer = {}, None
    if "before" in sides:
        models["before"], tokenizer = load_model_and_tokenizer(args.model, device="cpu", dtype=torch.float32)
    if "after" in sides or "lm_eval" in sides:
        models["after"], tokenizer = load_model_and_tokenizer(args.model, device="cpu", dtype=dtype)
    counting = CountingTokenizer(tokenizer)
    params = {
        "before": base.replace(batch_size=before_batch),
        "after": base.replace(batch_size=args.after_batch, stop=task.stop_strings),
    }
    lm_rows = args.lm_eval_batch or args.after_batch * args.n
    texts = {}  # str(prompt) -> its text as the sampler renders it (encode_prompt_ids: the chat template)
    for problem in [*warm, *problems]:
        prompt = problem["prompt"]
        texts[str(prompt)] = (
            prompt
            if isinstance(prompt, str)
            else tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
        )
    lm_run = lm_generated = None
    if "lm_eval" in sides:
        lm_run, lm_generated = lm_eval_side(
            models["after"],
            tokenizer,
            [(p["prompt"], texts[str(p["prompt"])]) for p in problems[:3]],
            args,
            task.stop_strings,
            lm_rows,
        )

    # per side, per repetition: samples, tokens drawn, per-problem correct counts (by problem id)
    record: dict[str, list[dict]] = {s: [] for s in sides}
    correct: dict[str, dict[str, int]] = {s: {} for s in sides}

    def ours(side: str):
        backend = TransformersBackend(models[side], counting, name=args.model)

        def run(r: int) -> None:
            counting.samples = counting.tokens = 0
            chunk = chunks[r] if r >= 0 else warm
            result = evaluate_model(backend, task, params[side], ks=(1,), problems=chunk, progress=False)
            if r >= 0:
                record[side].append({"samples": counting.samples, "tokens": counting.tokens})
                correct[side].update({p["problem_id"]: p["n_correct"] for p in result["per_problem"]})

        return run

    def theirs(r: int) -> None:
        chunk = chunks[r] if r >= 0 else warm
        lm_generated.clear()
        outputs = lm_run([texts[str(p["prompt"])] for p in chunk], args.seed + 1000 + r)
        if r >= 0:
            record["lm_eval"].append({"samples": len(chunk) * args.n, "generated": list(lm_generated)})
            for problem, completions in zip(chunk, outputs, strict=True):
                correct["lm_eval"][problem["problem_id"]] = sum(
                    task.is_correct(c, problem["answer"]) for c in completions
                )

    fns = {side: (theirs if side == "lm_eval" else ours(side)) for side in sides}
    cpu: dict[str, list[float]] = {}
    print(f"{len(problems)} problems x {args.n} in {args.reps} chunks; sides {', '.join(sides)}", file=sys.stderr)
    wall = _common.alternate(fns, reps=args.reps, warmup=1 if warm else 0, cpu_times=cpu)

    eos_ids = {t for t in (tokenizer.eos_token_id, tokenizer.pad_token_id) if t is not None}
    for rec in record.get("lm_eval", []):
        rec["tokens"], rec["positions"] = lm_eval_tokens(rec.pop("generated"), eos_ids)
    ids = [p["problem_id"] for p in problems]
    results = {}
    for side in sides:
        samples = [rec["samples"] for rec in record[side]]
        tokens = [rec["tokens"] for rec in record[side]]
        per_problem = [correct[side][i] / args.n for i in ids]
        interval = bootstrap_mean_ci(per_problem)
        res = {
            "seconds": _common.summary(wall[side]),
            "cpu_seconds": _common.summary(cpu[side]),
            "samples_per_cpu_second": sum(samples) / sum(cpu[side]),
            "samples_per_second": sum(samples) / sum(wall[side]),
            "tokens_per_cpu_second": sum(tokens) / sum(cpu[side]),
            "tokens_per_second": sum(tokens) / sum(wall[side]),
            "tokens_per_sample": sum(tokens) / sum(samples),
            "pass@1": interval.to_dict(),
            "per_problem_pass@1": per_problem,
        }
        if side == "lm_eval":
            res["positions_per_sample"] = sum(rec["positions"] for rec in record[side]) / sum(samples)
            res["rows_a_batch"] = lm_rows
        else:
            res["params"] = params[side].to_dict()
            res["dtype"] = str(models[side].dtype).removeprefix("torch.")
        if side == "lm_eval":
            res["dtype"] = str(models["after"].dtype).removeprefix("torch.")
        if "before" in sides and side != "before":
            before_pp = [correct["before"][i] / args.n for i in ids]
            res["pass@1_minus_before"] = bootstrap_paired_difference_ci(per_problem, before_pp).to_dict()
        results[side] = res

    def ratio(a: str, b: str) -> dict | None:
        if a not in sides or b not in sides:
            return None
        rate = {s: [rec["samples"] / t for rec, t in zip(record[s], cpu[s], strict=True)] for s in (a, b)}
        wall_rate = {s: [rec["samples"] / t for rec, t in zip(record[s], wall[s], strict=True)] for s in (a, b)}
        return {"cpu": _common.paired_ratio(rate[a], rate[b]), "wall": _common.paired_ratio(wall_rate[a], wall_rate[b])}

    ratios = {
        name: r
        for name, r in (
            ("after/before", ratio("after", "before")),
            ("lm_eval/before", ratio("lm_eval", "before")),
            ("after/lm_eval", ratio("after", "lm_eval")),
        )
        if r is not None
    }
    main_ratio = ratios.get("after/before")
    passed = None
    if main_ratio is not None:
        diff = results["after"]["pass@1_minus_before"]
        passed = main_ratio["cpu"]["median_of_ratios"] >= TARGET and diff["low"] <= 0 <= diff["high"]

    labels = {
        "before": f"before: float32, no stop, {before_batch} prompts a batch",
        "after": f"after: {results.get('after', {}).get('dtype', '?')}, stop {list(task.stop_strings)}, "
        f"{args.after_batch} prompts a batch",
        "lm_eval": f"lm-eval HFLM: {results.get('lm_eval', {}).get('dtype', '?')}, until, {lm_rows} rows a batch",
    }
    rows = []
    for side in sides:
        res = results[side]
        p1 = res["pass@1"]
        diff = res.get("pass@1_minus_before")
        rows.append(
            [
                labels[side],
                f"{res['samples_per_cpu_second']:.2f}",
                f"{res['samples_per_second']:.2f}",
                f"{res['tokens_per_cpu_second']:.0f}",
                f"{res['tokens_per_sample']:.1f}"
                + (f" ({res['positions_per_sample']:.1f} decoded)" if "positions_per_sample" in res else ""),
                f"{p1['estimate']:.3f} [{p1['low']:.3f}, {p1['high']:.3f}]",
                f"{diff['estimate']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}]" if diff else "",
            ]
        )
    table = _common.markdown_table(
        [
            "side",
            "samples / CPU s",
            "samples / s (wall)",
            "tokens / CPU s",
            "tokens a sample",
            "pass@1 [95% CI]",
            "pass@1 - before [paired 95% CI]",
        ],
        rows,
    )
    lines = [
        f"{name}: **{r['cpu']['median_of_ratios']:.2f}x** samples per CPU second (per-chunk "
        f"{', '.join(f'{v:.2f}' for v in r['cpu']['values'])}), {r['wall']['median_of_ratios']:.2f}x wall"
        for name, r in ratios.items()
    ]
    table += "\n\n" + "; ".join(lines)
    table += (
        f"\n\n{len(problems)} word_arithmetic test problems ({args.prompt} prompt: {PROMPTS[args.prompt]}) "
        f"x n={args.n}, "
        f"T={args.temperature}, max {args.max_tokens} new tokens, {args.model}, 1 thread, {args.reps} chunks "
        f"alternated after a warm-up; CPU bf16: {support}."
    )
    if passed is not None:
        table += f" Target after/before >= {TARGET}x with pass@1 within noise: {_common.verdict(passed)}."
    payload = {
        "params": vars(args) | {"before_batch": before_batch, "lm_eval_rows": lm_rows},
        "device": "cpu",
        "cpu_bf16": support,
        "task_kwargs": PROMPTS[args.prompt],
        "load_average_start": load_start,
        "results": results,
        "ratios": ratios,
        "target": f"after / before >= {TARGET}x samples per CPU second, pass@1 paired difference interval holds 0",
        "pass": passed,
        "load_average": _common.load_average(),
    }
    _common.write_results(args.out_name, payload, table)
    return payload


if __name__ == "__main__":
    main()
