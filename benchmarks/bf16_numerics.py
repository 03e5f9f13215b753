"""Is a bf16 base numerically sane for GRPO with LoRA? The real model's log-probs, LoRA gradients and next-token
distributions with the base in bfloat16 against float32 (issue 37; `cpu_bf16`).

    python -m benchmarks.bf16_numerics [--model smollm2-135m-instruct] [--sequences 8] [--completion 64]

One LoRA r16 policy (every linear layer, the LoRA B weights set to small random values so every adapter weight gets
a gradient) is built on the float32 base and copied onto a bfloat16 base (the LoRA weights float32 on both, as PEFT
keeps them). Completions of word_arithmetic train prompts are sampled from the float32 policy (T = 0.7, as
configs/real/cpu.yaml), then both policies score them the way TRL 1.16 does (`trl.trainer.utils.add_fused_lm_head`:
per-token log-probs at temperature 0.7, in the model's dtype), also with TRL's `cast_lm_head_to_fp32` on the bf16
base. Reported:

- log-probs: mean and max |bf16 - fp32| per completion token, and per completion (summed);
- gradients: the LoRA gradient of a GRPO-like loss (-sum_i A_i mean_t log p_it, A = +-1 by completion): cosine and
  relative error of bf16's against fp32's. For scale: two independent GRPO minibatches' gradients have a cosine of
  about 0.01 (DESIGN.md), so an error of a few percent is far below the sampling noise of a step;
- sampling: the total-variation distance between the next-token distributions (softmax(logits / 0.7), what
  grpo-ext's sampler draws from) at every completion position, and the share of positions where the sampler's
  inverse-CDF draw with the same uniform picks the same token.

Writes benchmarks/results/bf16_numerics.json. ~1-2 minutes on one thread.
"""

from __future__ import annotations

import argparse

from benchmarks import _common

NAME = "bf16_numerics"
TEMPERATURE = 0.7


def _policy(base, seed: int = 0):
    import torch
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 1e-3)
    return policy


def _score(policy, input_ids, attention_mask, completion_len: int):
    """TRL's per-token log-probs of the completion tokens (the fused head) and the full next-token logits there."""
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :-completion_len] = -100
    out = policy(input_ids=input_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True)
    return out.log_probs[:, -completion_len:]


def _logps_and_grads(policy, input_ids, attention_mask, completion_len, mask, advantages, chunk: int = 4):
    """Per-token log-probs and the LoRA gradient of -mean_i(A_i mean_t log p_it), ``chunk`` rows a backward pass (as
    TRL's micro-batches: the activations of all rows at once would take many GB)."""
    import torch

    policy.zero_grad(set_to_none=True)
    rows = input_ids.shape[0]
    logps = []
    for s in range(0, rows, chunk):
        part = _score(policy, input_ids[s : s + chunk], attention_mask[s : s + chunk], completion_len)
        m = mask[s : s + chunk]
        loss = -((part * m).sum(1) / m.sum(1).clamp(min=1) * advantages[s : s + chunk]).sum() / rows
        loss.backward()
        logps.append(part.detach().float())
    grad = torch.cat([p.grad.float().flatten() for p in policy.parameters() if p.requires_grad])
    return torch.cat(logps), grad


def main(argv: list[str] | None = None) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from grpo_ext.model_paths import resolve_model_path
    from grpo_ext.sampler.token_draws import counter_uniforms, draw_from_cdf, token_cdf
    from grpo_ext.tasks import get_task

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--completion", type=int, default=64)
    parser.add_argument("--name", default=NAME)
    args = parser.parse_args(argv)
    _common.set_threads(1)
    torch.manual_seed(0)
    folder = resolve_model_path(args.model)
    tok = AutoTokenizer.from_pretrained(folder)
    task = get_task("word_arithmetic", min_operands=2, max_operands=2, digits=2, num_fewshot=1)
    rows = task.load("train", args.sequences)

    bases = {d: AutoModelForCausalLM.from_pretrained(folder, dtype=d, use_safetensors=True) for d in ("float32",)}
    fp32 = _policy(bases["float32"])
    fp32.eval()
    # completions sampled from the float32 policy, left-padded prompts as TRL pads them
    prompts = [
        tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True)["input_ids"] for r in rows
    ]
    width = max(map(len, prompts))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    attn = (torch.arange(width) >= torch.tensor([width - len(p) for p in prompts]).unsqueeze(1)).long()
    with torch.no_grad():
        out = fp32.generate(
            input_ids=ids,
            attention_mask=attn,
            do_sample=True,
            temperature=TEMPERATURE,
            top_k=0,
            max_new_tokens=args.completion,
            pad_token_id=pad,
        )
    completion = out[:, width:]
    is_eos = completion == tok.eos_token_id
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1), completion.shape[1])
    cmask = (torch.arange(completion.shape[1]).unsqueeze(0) <= first.unsqueeze(1)).float()
    full_ids = out
    full_attn = torch.cat([attn, cmask.long()], 1)
    T = completion.shape[1]
    advantages = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(rows))])

    # the bf16 policy: the base loaded in bf16, the same LoRA weights (PEFT keeps them float32)
    def bf16_policy():
        policy = _policy(AutoModelForCausalLM.from_pretrained(folder, dtype="bfloat16", use_safetensors=True))
        policy.load_state_dict(fp32.state_dict(), strict=False)  # the same adapter values (cast to its dtype)
        return policy

    bf16, bf16_head32 = bf16_policy(), bf16_policy()
    lora_dtypes = sorted({str(p.dtype) for p in bf16.parameters() if p.requires_grad})
    add_fused_lm_head(fp32.get_base_model(), temperature=TEMPERATURE)
    add_fused_lm_head(bf16.get_base_model(), temperature=TEMPERATURE)
    add_fused_lm_head(bf16_head32.get_base_model(), temperature=TEMPERATURE, cast_lm_head_to_fp32=True)
    inner = bf16_head32.get_base_model()  # TRL's cast_lm_head_to_fp32: the (tied) head weight in float32, the
    inner.lm_head.weight.data = inner.lm_head.weight.data.float()  # embedding's output cast back to bf16
    inner.model.embed_tokens.register_forward_hook(lambda module, args, output: output.to(torch.bfloat16))

    results = {}
    ref_logps, ref_grad = _logps_and_grads(fp32, full_ids, full_attn, T, cmask, advantages)
    for label, policy in (("bf16", bf16), ("bf16_lm_head_fp32", bf16_head32)):
        logps, grad = _logps_and_grads(policy, full_ids, full_attn, T, cmask, advantages)
        diff = (logps - ref_logps).abs() * cmask
        seq = ((logps - ref_logps) * cmask).sum(1).abs()
        results[label] = {
            "logp_abs_err_mean": float(diff.sum() / cmask.sum()),
            "logp_abs_err_max": float(diff.max()),
            "sequence_logp_abs_err_mean": float(seq.mean()),
            "grad_cosine": float(torch.nn.functional.cosine_similarity(grad, ref_grad, dim=0)),
            "grad_relative_error": float((grad - ref_grad).norm() / ref_grad.norm()),
        }

    # next-token distributions (the plain forward, as the sampler reads logits)
    with torch.no_grad():
        fp32.eval()
        bf16.eval()
        keep = {"logits_to_keep": T + 1}  # the positions that predict the completion tokens (and one past them)
        l32 = fp32(input_ids=full_ids, attention_mask=full_attn, **keep).logits[:, :-1]
        l16 = bf16(input_ids=full_ids, attention_mask=full_attn, **keep).logits[:, :-1]
    keep = cmask.bool()
    l32, l16 = l32[keep].float(), l16[keep].float()
    p32, p16 = torch.softmax(l32 / TEMPERATURE, -1), torch.softmax(l16 / TEMPERATURE, -1)
    tv = 0.5 * (p32 - p16).abs().sum(-1)
    n = l32.shape[0]
    u = torch.from_numpy(counter_uniforms(np.arange(n, dtype=np.uint64), np.zeros(n, dtype=np.uint64)))
    same = draw_from_cdf(token_cdf(l32, TEMPERATURE, 1.0), u) == draw_from_cdf(token_cdf(l16, TEMPERATURE, 1.0), u)
    results["sampling"] = {
        "positions": n,
        "tv_mean": float(tv.mean()),
        "tv_max": float(tv.max()),
        "same_draw_share": float(same.float().mean()),
    }
    lengths = cmask.sum(1)
    payload = {
        "params": vars(args) | {"temperature": TEMPERATURE, "lora_dtypes_on_bf16_base": lora_dtypes},
        "mean_completion_length": float(lengths.mean()),
        "results": results,
    }
    rows_out = [
        [
            label,
            f"{r['logp_abs_err_mean']:.4f}",
            f"{r['logp_abs_err_max']:.3f}",
            f"{r['sequence_logp_abs_err_mean']:.3f}",
            f"{r['grad_cosine']:.4f}",
            f"{r['grad_relative_error']:.3f}",
        ]
        for label, r in results.items()
        if label != "sampling"
    ]
    text = _common.markdown_table(
        ["base", "|d logp| mean", "|d logp| max", "|d sum logp| / completion", "LoRA grad cosine", "grad rel. err"],
        rows_out,
    )
    s = results["sampling"]
    text += (
        f"\n\nagainst the float32 base; {len(rows)} completions (mean {payload['mean_completion_length']:.1f} tokens), "
        f"T = {TEMPERATURE}. Next-token distributions bf16 vs fp32 over {s['positions']} positions: total variation "
        f"mean {s['tv_mean']:.4f}, max {s['tv_max']:.3f}; the same inverse-CDF draw at {s['same_draw_share']:.1%}"
    )
    _common.write_results(args.name, payload, text)
    return payload


if __name__ == "__main__":
    main()
