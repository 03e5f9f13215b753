"""What stop strings change in base-model sampling: samples/s, tokens a sample and pass@1, without and with them.

    python -m benchmarks.stop_strings [--problems 40] [--n 16] [--temperature 0.7] [--max-tokens 64] [--reps 2]

The real base (SmolLM2-135M-Instruct, `make real-model`, float32, one thread) on `word_arithmetic` with one worked
example in the prompt (`num_fewshot: 1`), the first `--problems` test problems x n, through the harness
(`evaluate_model`, no cache) over `TransformersBackend`, with the harness's default batch (`min(8, 512 // n)`
prompts). Two sides alternate `--reps` times after a warm-up: no stop strings, and the task's (`Question:`). A base
model answers and then writes a new "Question: ..." until the budget ends; with the stop string the sampler ends
the sample at the token that completes it, so the tokens a sample costs fall. Tokens a sample are the new token ids
the sampler drew (EOS and the stop string's tokens included), read where the backend decodes them.

pass@1 should be the same within noise: the stopped samples are the free samples cut (same seeds, same draws up to
the stop), so a sample's verdict changes only where the answer the task extracts lay after the first "Question:"
(e.g. the last number of the invented follow-up question, which the lenient extraction falls back to).
"""

from __future__ import annotations

import argparse
import logging

from benchmarks import _common
from grpo_ext.evaluation.backends import TransformersBackend, load_model_and_tokenizer
from grpo_ext.evaluation.harness import evaluate_model, load_problems
from grpo_ext.sampler.sampling import SamplingParams
from grpo_ext.sampler.stops import cut_at_stop
from grpo_ext.tasks import get_task

MODEL = "smollm2-135m-instruct"


class CountingTokenizer:
    """The tokenizer, counting the samples and token ids it decodes into completions (the sampler decodes each
    prompt's samples with one `batch_decode`; its stop check uses `decode` on short tails, not counted)."""

    def __init__(self, tokenizer):
        self._tokenizer, self.samples, self.tokens = tokenizer, 0, 0

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __call__(self, *args, **kwargs):
        return self._tokenizer(*args, **kwargs)

    def batch_decode(self, sequences, **kwargs):
        self.samples += len(sequences)
        self.tokens += sum(len(ids) for ids in sequences)
        return self._tokenizer.batch_decode(sequences, **kwargs)


class Recording:
    """The backend, keeping each prompt's completions of the last run (the harness hands back scores only)."""

    def __init__(self, backend):
        self.backend, self.outputs = backend, {}
        self.name, self.fingerprint, self.backend_name = backend.name, backend.fingerprint, backend.backend_name

    def generate_stream(self, prompts, params, *, progress=False):
        for j, completions in self.backend.generate_stream(prompts, params, progress=progress):
            self.outputs[str(prompts[j])] = completions
            yield j, completions


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--problems", type=int, default=40)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default=MODEL)
    args = parser.parse_args(argv)
    _common.set_threads(1)
    logging.getLogger("grpo_ext").setLevel(logging.WARNING)
    load_start = _common.load_average()

    model, tokenizer = load_model_and_tokenizer(args.model, device="cpu")
    counting = CountingTokenizer(tokenizer)
    backend = Recording(TransformersBackend(model, counting, name=args.model))
    task = get_task("word_arithmetic", num_fewshot=1)
    problems = load_problems(task, "test", args.problems)
    base = SamplingParams(
        n=args.n,
        temperature=args.temperature,
        max_new_tokens=args.max_tokens,
        seed=args.seed,
        batch_size=max(1, min(8, 512 // args.n)),  # the harness CLI's default (grpo_ext.evaluation.cli)
    )
    sides = {"no_stop": base, "stop": base.replace(stop=task.stop_strings)}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    completions: dict[str, dict] = {}

    def side(name: str):
        def run(r: int) -> None:
            counting.samples = counting.tokens = 0
            result = evaluate_model(backend, task, sides[name], ks=(1,), problems=problems, progress=False)
            if r >= 0:  # warm-ups are not kept
                runs[name].append(
                    {
                        "pass@1": result["pass@k"]["1"],
                        "answers_extracted": result["answers_extracted"],
                        "tokens_per_sample": counting.tokens / counting.samples,
                        "samples": counting.samples,
                    }
                )
                completions[name] = dict(backend.outputs)

        return run

    cpu: dict[str, list[float]] = {}
    times = _common.alternate({name: side(name) for name in sides}, reps=args.reps, warmup=args.warmup, cpu_times=cpu)
    samples = args.problems * args.n
    rates = {name: [samples / t for t in times[name]] for name in times}
    # one thread on shared cores: the CPU seconds of this process are the steadier measure of the work
    cpu_rates = {name: [samples / t for t in cpu[name]] for name in cpu}
    ratio = _common.paired_ratio(rates["stop"], rates["no_stop"])
    cpu_ratio = _common.paired_ratio(cpu_rates["stop"], cpu_rates["no_stop"])
    results = {
        name: {
            "seconds": _common.summary(times[name]),
            "samples_per_second": _common.summary(rates[name]),
            "cpu_seconds": _common.summary(cpu[name]),
            "samples_per_cpu_second": _common.summary(cpu_rates[name]),
            "tokens_per_sample": _common.median([r["tokens_per_sample"] for r in runs[name]]),
            "pass@1": runs[name][0]["pass@1"],
            "answers_extracted": runs[name][0]["answers_extracted"],
            "pass@1_same_every_rep": len({r["pass@1"] for r in runs[name]}) == 1,
            "stop": list(sides[name].stop),
        }
        for name in sides
    }
    # the same seeds draw the same tokens up to the stop: sample i of a problem is one sample on both sides, and its
    # verdict changes only where the extracted answer lay after the stop string
    stop = sides["stop"].stop
    changes = {"holds_stop_string": 0, "right_only_without_stop": 0, "right_only_with_stop": 0, "cut_equal": 0}
    for problem in problems:
        free, cut = completions["no_stop"][str(problem["prompt"])], completions["stop"][str(problem["prompt"])]
        for a, b in zip(free, cut, strict=True):
            changes["holds_stop_string"] += any(s in a for s in stop)
            changes["cut_equal"] += cut_at_stop(a, stop) == b
            right = task.is_correct(a, problem["answer"]), task.is_correct(b, problem["answer"])
            changes["right_only_without_stop"] += right == (True, False)
            changes["right_only_with_stop"] += right == (False, True)
    rows = [
        [
            name,
            f"{res['samples_per_second']['median']:.2f}",
            f"{res['samples_per_cpu_second']['median']:.2f}",
            f"{res['tokens_per_sample']:.1f}",
            f"{res['pass@1']:.4f}",
            ", ".join(map(repr, res["stop"])) or "none",
        ]
        for name, res in results.items()
    ]
    table = _common.markdown_table(
        ["side", "samples/s (wall)", "samples per CPU second", "tokens a sample", "pass@1", "stop strings"], rows
    )
    table += (
        f"\n\nstop / no stop samples per second: **{ratio['median_of_ratios']:.2f}x** wall, "
        f"**{cpu_ratio['median_of_ratios']:.2f}x** CPU time (median of {args.reps} paired runs); {args.problems} "
        f"word_arithmetic test problems (num_fewshot 1) x n={args.n}, T={args.temperature}, max {args.max_tokens} "
        f"new tokens, {args.model}, float32, 1 thread. "
        f"Of the {samples} samples drawn without stop strings, {changes['holds_stop_string']} hold one; "
        f"{changes['cut_equal']} of {samples} stopped samples are the free ones cut; verdicts that differ: right only "
        f"without stop {changes['right_only_without_stop']}, right only with stop {changes['right_only_with_stop']}"
    )
    payload = {
        "params": vars(args),
        "load_average_start": load_start,
        "samples_per_run": samples,
        "results": results,
        "ratio": ratio,
        "cpu_ratio": cpu_ratio,
        "paired_samples": changes,
        "load_average": _common.load_average(),
    }
    _common.write_results("stop_strings", payload, table)
    return payload


if __name__ == "__main__":
    main()
