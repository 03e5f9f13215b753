"""share_prompt_forward (grpo_ext/shared_prompt.py): each group's prompt forwarded once in the loss gives TRL's
unshared log-probs, entropies and gradients; the group shuffle keeps groups whole and the optimizer step's gradient."""

from __future__ import annotations

import contextlib
import inspect
import types

import pytest
import torch
from trl import GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from grpo_ext import shared_prompt as sp
from grpo_ext.errors import UserError
from tests.trainer_utils import TASK, tiny_args, tiny_trainer

PROMPT_WIDTH, COMPLETION = 9, 6


def _tiny_lora_llama(seed: int = 0):
    """A random Llama of 2 layers (GQA, RoPE) with TRL's fused LM head and LoRA on its attention and MLP."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
    )
    model = LlamaForCausalLM(config)
    add_fused_lm_head(model, outputs=("log_probs", "entropy"))  # as TRL does, before PEFT
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"])
    model = get_peft_model(model, lora)
    for name, p in model.named_parameters():  # LoRA B starts at zero: give the gradient of A something to see
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    return model


def _batch(prompt_lengths=(9, 5, 3), group=3, seed=1):
    """TRL's layout: prompts left-padded to one width, each repeated `group` times, completions right-padded (one
    row of each group empty but its first token)."""
    gen = torch.Generator().manual_seed(seed)
    ids, mask = [], []
    for n in prompt_lengths:
        prompt = torch.randint(1, 64, (n,), generator=gen)
        for g in range(group):
            completion = torch.randint(1, 64, (COMPLETION,), generator=gen)
            keep = COMPLETION - 2 * g if g < group - 1 else 1
            ids.append(torch.cat([torch.zeros(PROMPT_WIDTH - n, dtype=torch.long), prompt, completion]))
            mask.append(
                torch.cat(
                    [torch.zeros(PROMPT_WIDTH - n), torch.ones(n), torch.ones(keep), torch.zeros(COMPLETION - keep)]
                )
            )
    return torch.stack(ids), torch.stack(mask).long()


def _trl_log_probs(model, ids, mask, compute_entropy=True):
    """TRL 1.16's own (unshared) `_get_per_token_logps_and_entropies` on a stand-in trainer."""
    stand_in = types.SimpleNamespace(accelerator=types.SimpleNamespace(autocast=contextlib.nullcontext))
    method = inspect.unwrap(GRPOTrainer._get_per_token_logps_and_entropies)  # without TRL's profiling wrapper
    logps, entropies, _ = method(stand_in, model, ids, mask, COMPLETION, compute_entropy=compute_entropy)
    return logps, entropies


def _lora_grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_shared_log_probs_entropies_and_lora_gradients_equal_trls():
    model = _tiny_lora_llama()
    ids, mask = _batch()
    completion_mask = mask[:, -COMPLETION:].float()

    ref_logps, ref_entropies = _trl_log_probs(model, ids, mask)
    ((ref_logps * completion_mask).sum() + (ref_entropies * completion_mask).sum()).backward()
    ref_grads = _lora_grads(model)
    model.zero_grad(set_to_none=True)

    logps, entropies = sp.shared_prompt_log_probs(model, ids, mask, COMPLETION, compute_entropy=True)
    ((logps * completion_mask).sum() + (entropies * completion_mask).sum()).backward()
    grads = _lora_grads(model)

    assert logps.shape == entropies.shape == (ids.size(0), COMPLETION)
    torch.testing.assert_close(logps, ref_logps, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropies, ref_entropies, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and len(grads) > 0
    for name in grads:
        assert ref_grads[name].abs().max() > 0, name  # every LoRA weight gets a gradient to compare
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    assert torch.isfinite(logps).all() and torch.isfinite(entropies).all()


def test_nothing_shared_or_a_one_token_prompt_leaves_the_forward_to_trl():
    model = _tiny_lora_llama()
    ids, mask = _batch(group=1)  # every prompt row distinct
    assert sp.shared_prompt_log_probs(model, ids, mask, COMPLETION) is None
    ids, mask = _batch(group=3)
    assert (
        sp.shared_prompt_log_probs(model, ids[:, PROMPT_WIDTH - 1 :], mask[:, PROMPT_WIDTH - 1 :], COMPLETION) is None
    )


def test_one_shared_prompt_and_an_empty_completion_give_no_nan():
    model = _tiny_lora_llama()
    ids, mask = _batch(prompt_lengths=(4,), group=2)
    mask[1, PROMPT_WIDTH:] = 0  # a completion with no token at all
    logps, entropies = sp.shared_prompt_log_probs(model, ids, mask, COMPLETION, compute_entropy=True)
    ref_logps, ref_entropies = _trl_log_probs(model, ids, mask)
    assert torch.isfinite(logps).all() and torch.isfinite(entropies).all()
    assert (logps[1] == 0).all()  # no label, no score (as TRL's masked positions)
    torch.testing.assert_close(logps, ref_logps, rtol=1e-5, atol=1e-5)


class _ShiftedPositions(torch.nn.Module):
    """The model with the completion forward's position ids off by one: what the reference comparison must catch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, **kwargs):
        if "cache" in kwargs:
            start = kwargs["cache"].get_seq_length()
            n = kwargs["input_ids"].size(1)
            kwargs["position_ids"] = torch.arange(start + 1, start + 1 + n, device=kwargs["input_ids"].device)[None]
        return self.model(**kwargs)


def test_the_comparison_catches_an_off_by_one_in_the_positions():
    model = _tiny_lora_llama()
    ids, mask = _batch()
    ref_logps, _ = _trl_log_probs(model, ids, mask)
    wrong, _ = sp.shared_prompt_log_probs(_ShiftedPositions(model), ids, mask, COMPLETION)
    completion_mask = mask[:, -COMPLETION:].bool()
    assert (wrong - ref_logps)[completion_mask].abs().max() > 1e-3


def test_device_strict_nothing_made_without_a_device():
    """Under a default device of "meta", a tensor made without its input's device would be a meta tensor and fail
    against the CPU batch. The model's own forward (transformers') runs with the CPU default, as device_strict does
    for TRL."""
    model = _tiny_lora_llama()
    ids, mask = _batch()
    ref_logps, _ = _trl_log_probs(model, ids, mask)

    class _CpuModel(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kwargs):
            with torch.device("cpu"):
                return self.inner(**kwargs)

    with torch.device("meta"):
        logps, _ = sp.shared_prompt_log_probs(_CpuModel(model), ids, mask, COMPLETION)
        permutation = sp.group_permutation(12, 4)
        shuffled = sp.shuffle_groups({"x": ids, "y": list(range(ids.size(0))), "s": torch.tensor(1.0, device="cpu")}, 3)
    assert logps.device.type == "cpu" and permutation.device.type == "cpu" and shuffled["x"].device.type == "cpu"
    torch.testing.assert_close(logps, ref_logps, rtol=1e-5, atol=1e-5)


def test_group_permutation_keeps_groups_whole_and_in_order():
    torch.manual_seed(0)
    seen = set()
    for _ in range(20):
        perm = sp.group_permutation(12, 4)
        assert sorted(perm.tolist()) == list(range(12))
        blocks = perm.view(3, 4)
        assert (blocks - blocks[:, :1] == torch.arange(4)).all() and (blocks[:, 0] % 4 == 0).all()
        seen.add(tuple(blocks[:, 0].tolist()))
    assert len(seen) > 1  # it does shuffle
    with pytest.raises(ValueError, match="groups of 5"):
        sp.group_permutation(12, 5)


def test_shuffle_groups_moves_every_field_alike_and_falls_back_to_rows():
    ids = torch.arange(12).repeat_interleave(2).view(12, 2)
    group_of = [i // 4 for i in range(12)]
    out = sp.shuffle_groups({"ids": ids, "group": group_of, "none": None, "scalar": torch.tensor(3)}, 4)
    assert out["none"] is None and out["scalar"] == 3
    assert [int(r[0]) // 4 for r in out["ids"]] == out["group"]  # rows and list fields moved together
    assert all(len(set(out["group"][i : i + 4])) == 1 for i in range(0, 12, 4))  # groups whole
    rows = sp.shuffle_groups({"ids": ids[:10]}, 4)["ids"]  # 10 rows: no whole groups, TRL's row shuffle
    assert sorted(rows[:, 0].tolist()) == list(range(10))


@pytest.mark.parametrize(
    "loss_type, kwargs, reason",
    [
        ("dapo", {}, None),
        ("grpo", {}, None),
        ("dr_grpo", {}, None),
        ("bnpo", {}, "micro-batch's own token count"),
        ("dapo", {"top_entropy_quantile": 0.5}, "top_entropy_quantile"),
        ("dapo", {"entropy_bonus": True}, "entropy bonus"),
    ],
)
def test_which_losses_keep_their_gradient_under_the_group_shuffle(loss_type, kwargs, reason):
    got = sp.group_shuffle_changes_loss(
        loss_type, kwargs.get("top_entropy_quantile", 1.0), kwargs.get("entropy_bonus", False)
    )
    assert (got is None) if reason is None else (reason in got)


def _step_gradients(share: bool, loss_type: str, tmp_path):
    """One optimizer step's accumulated gradients (no optimizer step) on 4 prompts x 4 generations, 2 micro-batches
    of 8 rows; the generation batch is the same for both settings (same seed, same model, same sampling)."""
    from transformers import set_seed

    args = tiny_args(
        tmp_path=tmp_path,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        num_generations=4,
        max_completion_length=12,
        loss_type=loss_type,
        share_prompt_forward=share,
    )
    set_seed(0)
    trainer = tiny_trainer(args=args, n_prompts=8)
    rows = TASK.load("train", 8).select(range(4)).to_list()
    batch = [row for row in rows for _ in range(4)]
    calls = {"shared": 0}
    original = sp.shared_prompt_log_probs

    def counted(*a, **k):
        out = original(*a, **k)
        calls["shared"] += out is not None
        return out

    set_seed(1)
    trainer.model.train()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("grpo_ext.shared_prompt.shared_prompt_log_probs", counted)
        for _ in range(args.gradient_accumulation_steps):
            trainer.training_step(trainer.model, batch, None)
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return trainer, grads, calls["shared"]


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "bnpo"])
def test_a_step_with_shared_prompts_has_trls_gradient(tmp_path, loss_type):
    trl_trainer, trl_grads, trl_shared = _step_gradients(False, loss_type, tmp_path / "trl")
    trainer, grads, shared = _step_gradients(True, loss_type, tmp_path / "shared")
    assert trl_shared == 0 and shared == 2  # both micro-batches forwarded their prompts once per group
    assert trainer._group_shuffle == (loss_type != "bnpo")  # bnpo keeps TRL's row shuffle
    if trainer._group_shuffle:
        for micro_batch in trainer._buffered_inputs:  # whole groups: 2 prompts of 4 rows in each micro-batch of 8
            prompts = micro_batch["prompt_ids"]
            assert torch.unique(prompts, dim=0).size(0) == 2
            assert all((prompts[i : i + 4] == prompts[i]).all() for i in (0, 4))
    assert grads.keys() == trl_grads.keys() and any(g.abs().max() > 0 for g in trl_grads.values())
    for name in grads:
        torch.testing.assert_close(grads[name], trl_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_refused_with_activation_checkpointing(tmp_path):
    with pytest.raises(UserError, match="share_prompt_forward: needs activation_checkpointing off"):
        tiny_args(tmp_path=tmp_path, share_prompt_forward=True, activation_checkpointing=True)


def test_trains_a_step_device_strict_with_a_grouped_shuffle(tmp_path):
    from tests.device_strict import device_strict

    args = tiny_args(tmp_path=tmp_path, max_steps=1, gradient_accumulation_steps=2, share_prompt_forward=True)
    trainer = tiny_trainer(args=args)
    with device_strict():
        trainer.train()
    assert trainer.state.global_step == 1 and trainer._group_shuffle
    assert torch.isfinite(torch.tensor([h["loss"] for h in trainer.state.log_history if "loss" in h])).all()


def _attention_ops(fn) -> set[str]:
    """The SDPA kernels `fn()` runs (forward and backward)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages() if "attention" in e.key or "_softmax" in e.key}


def test_the_losss_math_attention_on_a_cpu_gives_trls_flash_log_probs_and_gradients():
    """Issue 49: on a CPU the loss attends through SDPA's math backend (its flash kernel's backward is slow there);
    log-probs, entropies and LoRA gradients equal TRL's (SDPA's own pick, the flash kernel) up to float rounding."""
    model = _tiny_lora_llama()
    ids, mask = _batch()
    completion_mask = mask[:, -COMPLETION:].float()
    got = {}

    def trl():
        logps, entropies = _trl_log_probs(model, ids, mask)
        ((logps * completion_mask).sum() + (entropies * completion_mask).sum()).backward()
        got["trl"] = logps, entropies, _lora_grads(model)
        model.zero_grad(set_to_none=True)

    def ours():
        with sp.loss_attention(model, ids):
            logps, entropies = sp.shared_prompt_log_probs(model, ids, mask, COMPLETION, compute_entropy=True)
        ((logps * completion_mask).sum() + (entropies * completion_mask).sum()).backward()
        got["ours"] = logps, entropies, _lora_grads(model)
        model.zero_grad(set_to_none=True)

    trl_ops, our_ops = _attention_ops(trl), _attention_ops(ours)
    assert any("flash" in op for op in trl_ops), trl_ops  # what SDPA picks on a CPU, forward and backward
    assert not any("flash" in op for op in our_ops) and any("_softmax" in op for op in our_ops), our_ops
    (ref_logps, ref_entropies, ref_grads), (logps, entropies, grads) = got["trl"], got["ours"]
    torch.testing.assert_close(logps, ref_logps, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropies, ref_entropies, rtol=1e-5, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and len(grads) > 0
    for name in grads:
        assert ref_grads[name].abs().max() > 0, name
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


def test_the_math_attention_only_where_it_helps(monkeypatch):
    """SDPA's own pick without a gradient (old/reference log-probs), off a CPU's tensors, when turned off, and where
    the probabilities the math backend keeps for the backward would pass MATH_ATTENTION_BYTES."""
    model = _tiny_lora_llama()
    ids, _ = _batch()
    assert not isinstance(sp.loss_attention(model, ids), contextlib.nullcontext)
    with torch.no_grad():
        assert isinstance(sp.loss_attention(model, ids), contextlib.nullcontext)
    assert isinstance(sp.loss_attention(types.SimpleNamespace(), ids), contextlib.nullcontext)  # no config
    config = model.config
    size = ids.size(0) * config.num_attention_heads * ids.size(1) ** 2 * config.num_hidden_layers * 4
    monkeypatch.setattr(sp, "MATH_ATTENTION_BYTES", size - 1)
    assert isinstance(sp.loss_attention(model, ids), contextlib.nullcontext)
    monkeypatch.setattr(sp, "MATH_ATTENTION_BYTES", size)
    assert not isinstance(sp.loss_attention(model, ids), contextlib.nullcontext)
    monkeypatch.setattr(sp, "CPU_MATH_ATTENTION", False)
    assert isinstance(sp.loss_attention(model, ids), contextlib.nullcontext)
