"""What the fixed-shape decode step costs on the CPU: our sampler with ``decode="eager"`` (the CPU default) against
``decode="static"`` (and, with ``--compiled``, ``decode="compiled"``: inductor on the CPU), same everything else.

    OMP_NUM_THREADS=1 python -m benchmarks.decode_steps_cpu [--prompts 64] [--n 16] [--batch 8,32] [--reps 5]

The embedded model (float32, one thread), the arithmetic task's test prompts, T = 1, top-p 1, ``--max-tokens`` new
tokens; ``--batch`` prompts per batch, so ``batch * n`` slots (128 and 512 by default: the GPU benchmark's decode
batches). Timed: ``sample`` over all prompts, the sides alternated in rotating order (benchmarks/_common.alternate)
after one untimed warm-up each; reported: median seconds, ms per decode step (median seconds / decode steps, the
steps counted in the warm-up) and each side's time over eager (median of per-repetition ratios). The samples of the
sides are checked equal. Prints the table and writes ``benchmarks/results/decode_steps_cpu.json``.
"""

from __future__ import annotations

import argparse

from benchmarks import _common

DECODES = ("eager", "static", "compiled")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--batch", default="8,32", help="prompts per batch, comma-separated (slots = batch * n)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--compiled", action="store_true", help="also time decode='compiled' (inductor, CPU)")
    args = parser.parse_args(argv)
    _common.set_threads(1)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_ext.sampler.decoder import Decoder
    from grpo_ext.sampler.sampling import SamplingParams, sample
    from grpo_ext.tasks import get_task

    model = AutoModelForCausalLM.from_pretrained(_common.model_dir(), dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(_common.model_dir())
    prompts = list(get_task("arithmetic").load("test", args.prompts)["prompt"])
    decodes = DECODES if args.compiled else DECODES[:2]
    steps = [0]
    step = Decoder.step

    def counted(decoder):  # decode steps of a call (the warm-up's: the same for every side and repetition)
        steps[0] += 1
        return (yield from step(decoder))

    Decoder.step = counted
    rows, results = [], []
    for batch in (int(b) for b in args.batch.split(",")):
        outputs, counts = {}, {}

        def side(decode: str, batch=batch, outputs=outputs):
            def run(r: int) -> None:
                params = SamplingParams(
                    n=args.n, max_new_tokens=args.max_tokens, seed=max(r, 0), batch_size=batch, decode=decode
                )
                outputs[decode, r] = sample(model, tokenizer, prompts, params, progress=False)

            return run

        sides = {decode: side(decode) for decode in decodes}
        for decode, call in sides.items():  # warm-up: counts the steps (and compiles)
            steps[0] = 0
            call(-1)
            counts[decode] = steps[0]
        times = _common.alternate(sides, reps=args.reps, warmup=0)
        same = all(outputs[d, i] == outputs["eager", i] for d in decodes for i in range(args.reps))
        result = {"batch": batch, "slots": min(batch * args.n, 512), "decode_steps": counts, "same_samples": same}
        result["seconds"] = {d: _common.summary(t) for d, t in times.items()}
        result["time_over_eager"] = {d: _common.paired_ratio(times[d], times["eager"]) for d in decodes if d != "eager"}
        results.append(result)
        for d in decodes:
            s, ratio = result["seconds"][d], result["time_over_eager"].get(d)
            cell = "1" if ratio is None else f"{ratio['median_of_ratios']:.3f}x ({ratio['q1']:.3f}-{ratio['q3']:.3f})"
            rows.append([result["slots"], d, f"{s['median']:.3g} ({s['q1']:.3g}-{s['q3']:.3g})",
                         f"{s['median'] / counts[d] * 1e3:.3g}", counts[d], cell, same])  # fmt: skip
    Decoder.step = step
    table = _common.markdown_table(["slots", "decode", "median s (IQR)", "ms / decode step", "decode steps",
                              "time / eager (IQR)", "same samples"], rows)  # fmt: skip
    payload = {"params": vars(args), "results": results}
    _common.write_results("decode_steps_cpu", payload, table)
    return payload


if __name__ == "__main__":
    main()
