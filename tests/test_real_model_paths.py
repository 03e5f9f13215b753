"""The real-model paths on SmolLM2-135M-Instruct (a BPE tokenizer, a chat template, pretrained weights) and the
word-problem task: the harness, GRPO with LoRA (process supervision on BPE step ends) and with 4-bit QLoRA, and a
`step_tag` PRM built from it. Tiny on purpose (a few tokens, one step each): the paths, not the numbers.

They need the converted model: `make real-model` (which `make test` runs first). Without it they skip, saying so."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig

from grpo_ext.advantages import process_advantages
from grpo_ext.assembly import build_grpo_trainer
from grpo_ext.real_model_fetch import MAKE_COMMAND, is_complete, real_model_dir
from grpo_ext.reasoning_steps import step_end_token_indices, step_texts
from grpo_ext.rewards.prm import load_process_reward_model
from grpo_ext.sampler.sampling import SamplingParams, encode_prompt_ids, sample
from grpo_ext.tasks import get_task
from tests.trainer_utils import tiny_args

NAME = "smollm2-135m-instruct"
FOLDER = real_model_dir(NAME)
pytestmark = pytest.mark.skipif(
    not is_complete(FOLDER), reason=f"the real model is not at {FOLDER}: `{MAKE_COMMAND}` fetches it (93 MB, once)"
)
TASK = get_task("word_arithmetic", num_fewshot=1)


@pytest.fixture(scope="module")
def model_and_tokenizer():
    model = AutoModelForCausalLM.from_pretrained(FOLDER, use_safetensors=True, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(FOLDER)


def test_harness_samples_through_the_chat_template_as_generate_does(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    prompt = TASK.load("test", 1)[0]["prompt"]
    ids = encode_prompt_ids(tokenizer, [prompt])[0]
    assert ids == tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)["input_ids"]
    text = tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("Answer:<|im_end|>\n<|im_start|>assistant\n")
    got = sample(model, tokenizer, [prompt], SamplingParams(n=1, temperature=0.0, max_new_tokens=10), progress=False)
    expected = model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10, pad_token_id=2)
    assert got == [[tokenizer.decode(expected[0, len(ids) :], skip_special_tokens=True)]]


def test_harness_cli_reports_the_real_model_by_name(tmp_path):
    from evals.passk_majk import main

    out = main(
        ["--model", NAME, "--task", "word_arithmetic", "--split", "test", "--limit", "2", "--n", "2"]
        + ["--max-new-tokens", "6", "--no-progress", "--out", str(tmp_path)]
    )
    (result,) = out["results"]
    assert result["n_problems"] == 2 and result["samples"]["generated"] == 4
    assert result["backend"] == "transformers" and result["model"] == NAME


def real_args(tmp_path, **overrides):
    """The tests' tiny GRPO settings, one step, the real task's step separator (filled in from the task)."""
    return tiny_args(
        tmp_path=tmp_path, **{"max_steps": 1, "max_completion_length": 20, "step_separator": None, **overrides}
    )


def lora_args(**overrides):
    return ModelConfig(model_name_or_path=NAME, dtype="float32", use_peft=True, lora_r=4, lora_alpha=8, **overrides)


def lora_weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_B" in n}


def lines_with_a_number(prompts, completions, **kwargs):
    """A scripted step score (1.0 for a line holding a digit, else 0.0), one per line as the trainer splits them.
    It stands in for the task's verifier here: since issue 48 the verifier pays only a new right running total, which
    the base model's 20-token samples hardly ever write, so its scores give these groups no signal to compare."""
    return [
        [float(any(ch.isdigit() for ch in line)) for line in step_texts(c[-1]["content"], "newline")]
        for c in completions
    ]


def test_lora_grpo_with_process_supervision_on_bpe_step_ends(tmp_path):
    """Step ends land on the BPE tokens that hold each line's newline (or the last token), where the task's step
    verifier has its lines; the advantages are the DeepSeekMath process advantages of the step scores there (a
    scripted score, :func:`lines_with_a_number`), and their loss trains the LoRA weights."""
    args = real_args(tmp_path, advantage_mode="process", process_include_outcome=False)
    trainer = build_grpo_trainer(
        TASK,
        args,
        model_args=lora_args(),
        process_reward_funcs=[lines_with_a_number],
        train_dataset=TASK.load("train", 8),
    )
    assert args.step_separator == "newline"
    trainer.current_gradient_accumulation_steps = 1
    tok = trainer.processing_class
    data = trainer.train_dataset
    torch.manual_seed(0)
    trainer.model.train()
    for first in range(0, 8, 2):  # the first pair of prompts whose groups have step-level signal
        batch = [data[i] for i in (first, first + 1) for _ in range(4)]
        out = trainer._generate_and_score_completions(batch)
        if out["advantages"].abs().sum() > 0:
            break
    advantages = out["advantages"]
    assert advantages.shape == out["completion_ids"].shape and advantages.abs().sum() > 0
    step_rewards = torch.full(advantages.shape, math.nan)
    newline_steps = 0
    for row, (ids, mask) in enumerate(zip(out["completion_ids"], out["completion_mask"], strict=True)):
        ids = ids[mask.bool()].tolist()
        text = tok.decode(ids, skip_special_tokens=True)
        steps = step_texts(text, "newline")
        ends = step_end_token_indices(tok, ids, "newline")
        verified = TASK.verify_steps(batch[row]["prompt"][-1]["content"], text)  # the verifier's lines are the steps
        scores = [float(any(ch.isdigit() for ch in step)) for step in steps]
        assert len(ends) == len(steps) == len(verified)
        for step, end in zip(steps, ends, strict=True):
            prefix = tok.decode(ids[: end + 1], skip_special_tokens=True)
            shorter = tok.decode(ids[:end], skip_special_tokens=True)
            assert prefix.rstrip().endswith(step)  # the step is complete at its end token ...
            if "\n" in prefix[len(shorter) :]:  # ... and its end token holds the line break (BPE merges it: ".\n")
                newline_steps += 1
            else:  # ... or it is the completion's last content token
                assert tok.decode(ids[end + 1 :], skip_special_tokens=True).strip() == ""
        for end, score in zip(ends, scores, strict=True):
            step_rewards[row, end] = score
    assert newline_steps > 0
    torch.testing.assert_close(advantages, process_advantages(step_rewards, group_size=4))

    # this batch's loss gives the LoRA weights, and only them, a gradient (a batch drawn afresh may hold no two scored
    # steps that differ: a line without a number gets no score)
    trainer.compute_loss(trainer.model, out).backward()
    grads = {n: p.grad for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert any(g is not None and g.abs().sum() > 0 for g in grads.values())
    assert not any(p.requires_grad for n, p in trainer.model.named_parameters() if "lora_" not in n)


def digit_reward(completions, **kwargs):
    """More digits, more reward: differs within a group of sampled completions, so a step has a gradient."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / 10 for t in texts]


def test_qlora_grpo_step_on_the_real_model(tmp_path):
    import bitsandbytes as bnb

    args = real_args(tmp_path, per_device_train_batch_size=4, max_completion_length=12)
    model_args = lora_args(load_in_4bit=True, bnb_4bit_quant_type="nf4", use_bnb_nested_quant=True)
    trainer = build_grpo_trainer(
        TASK, args, model_args=model_args, reward_funcs=[digit_reward], train_dataset=TASK.load("train", 4)
    )
    layers = [m for m in trainer.model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(layers) == 30 * 7  # every projection of the 30 blocks in 4 bits; lm_head (tied) is not
    before = lora_weights(trainer.model)
    trainer.train()
    after = lora_weights(trainer.model)
    assert trainer.state.global_step == 1 and any(not torch.equal(before[n], after[n]) for n in before)


def test_step_tag_prm_built_from_the_real_model(tmp_path, model_and_tokenizer):
    """Math-Shepherd's format on SmolLM2's own BPE tokenizer: ` ки` is two tokens (` к`, `и`); the score of a step is
    P(+) of the softmax over the logits of `+` and `-` at the token that ends the tag."""
    model, tokenizer = model_and_tokenizer
    folder = tmp_path / "prm"
    folder.mkdir()
    for path in FOLDER.iterdir():
        (folder / path.name).symlink_to(path)  # the weights are not copied
    prm = load_process_reward_model(folder, "step_tag", step_separator="newline")
    row = TASK.load("test", 1)[0]
    completions = ["48 - 5 = 43\n#### 43", "#### 7", ""]
    got = prm(prompts=[row["prompt"]] * 3, completions=completions, question=[row["question"]] * 3)

    def by_hand(steps):
        text = row["question"] + " " + "\n".join(f"{s} ки" for s in steps)
        ids = tokenizer(text)["input_ids"]
        k, i = tokenizer.convert_tokens_to_ids(["ĠÐº", "Ð¸"])
        positions = [j for j in range(1, len(ids)) if ids[j - 1] == k and ids[j] == i]
        assert len(positions) == len(steps)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, positions]
        plus, minus = tokenizer.convert_tokens_to_ids(["+", "-"])
        return torch.softmax(logits[:, [plus, minus]], dim=-1)[:, 0].tolist()

    assert got[0] == pytest.approx(by_hand(["48 - 5 = 43", "#### 43"]), abs=1e-5)
    assert got[1] == pytest.approx(by_hand(["#### 7"]), abs=1e-5) and got[2] == []
