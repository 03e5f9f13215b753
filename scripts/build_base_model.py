"""Train the embedded base model from scratch on CPU and write it to grpo_ext/assets/embedded/.

A 1 M-parameter Llama with a character tokenizer, supervised on the arithmetic task's reference solutions
(loss on completion tokens only). The step count is chosen so the model is partly competent: on held-out
prompts at temperature 1.0, pass@1 in 0.2-0.6 (room for RL) and pass@16 >= 0.8 (RL can find right answers).
Deterministic for a seed and a thread count (the shipped model: 650 steps, 1 thread). Usage:

    OMP_NUM_THREADS=1 python scripts/build_base_model.py [--steps 650] [--out grpo_ext/assets/embedded]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from grpo_ext.char_tokenizer import build_char_tokenizer
from grpo_ext.evaluation.metrics import maj_at_k, pass_at_k
from grpo_ext.evaluation.sampling import sample_completions
from grpo_ext.models import EMBEDDED_MODEL_DIR
from grpo_ext.tasks import get_task


def model_config(tokenizer) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        intermediate_size=512,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )


def sft_batches(tokenizer, prompts, solutions, batch_size, generator):
    """Endless shuffled batches: input ids (right-padded) and labels masked to the completion tokens."""
    prompt_ids = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    completion_ids = [tokenizer(s, add_special_tokens=False).input_ids + [tokenizer.eos_token_id] for s in solutions]
    while True:
        order = torch.randperm(len(prompts), generator=generator).tolist()
        for start in range(0, len(order) - batch_size + 1, batch_size):
            rows = [(prompt_ids[i], completion_ids[i]) for i in order[start : start + batch_size]]
            width = max(len(p) + len(c) for p, c in rows)
            input_ids = torch.full((batch_size, width), tokenizer.pad_token_id)
            labels = torch.full((batch_size, width), -100)
            attention_mask = torch.zeros((batch_size, width), dtype=torch.long)
            for r, (p, c) in enumerate(rows):
                seq = p + c
                input_ids[r, : len(seq)] = torch.tensor(seq)
                labels[r, len(p) : len(seq)] = torch.tensor(c)
                attention_mask[r, : len(seq)] = 1
            yield input_ids, attention_mask, labels


def evaluate(model, tokenizer, task, n_prompts: int, n: int, seed: int) -> dict:
    test = task.load("test", n_prompts)
    samples = sample_completions(
        model, tokenizer, test["prompt"], n, temperature=1.0, max_new_tokens=64, batch_size=16, seed=seed
    )
    greedy = sample_completions(
        model, tokenizer, test["prompt"], 1, temperature=0.0, max_new_tokens=64, batch_size=64, seed=seed
    )
    pass1, passn, majn = [], [], []
    for completions, answer in zip(samples, test["answer"], strict=True):
        correct = [task.is_correct(c, answer) for c in completions]
        answers = [task.extract_answer(c) for c in completions]
        pass1.append(pass_at_k(n, sum(correct), 1))
        passn.append(pass_at_k(n, sum(correct), n))
        majn.append(maj_at_k(answers, correct, n))
    acc = [task.is_correct(g[0], a) for g, a in zip(greedy, test["answer"], strict=True)]
    return {
        "n_prompts": n_prompts,
        "temperature": 1.0,
        "n": n,
        "pass@1": sum(pass1) / n_prompts,
        f"pass@{n}": sum(passn) / n_prompts,
        f"maj@{n}": sum(majn) / n_prompts,
        "greedy": sum(acc) / n_prompts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=650, help="optimizer steps (batch 128)")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-prompts", type=int, default=200)
    parser.add_argument("--out", type=Path, default=EMBEDDED_MODEL_DIR)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    task = get_task("arithmetic", seed=args.seed)
    tokenizer = build_char_tokenizer()
    model = LlamaForCausalLM(model_config(tokenizer))
    print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M")

    train = task.load("train", 100_000)
    batches = sft_batches(
        tokenizer, train["prompt"], train["solution"], args.batch_size, torch.Generator().manual_seed(args.seed)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / args.warmup))
    model.train()
    start = time.time()
    for step in (bar := tqdm(range(args.steps), desc="sft")):
        input_ids, attention_mask, labels = next(batches)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 25 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    train_seconds = time.time() - start

    metrics = evaluate(model, tokenizer, task, args.eval_prompts, n=16, seed=args.seed)
    metrics.update(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        train_seconds=round(train_seconds, 1),
        final_loss=round(loss.item(), 4),
    )
    print(json.dumps(metrics, indent=2))
    if not (0.2 <= metrics["pass@1"] <= 0.6 and metrics["pass@16"] >= 0.8):
        print("warning: outside the target band (pass@1 0.2-0.6, pass@16 >= 0.8); adjust --steps")

    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(args.out, safe_serialization=True)
    tokenizer.save_pretrained(args.out)
    (args.out / "base_model_metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
