"""`cpu_bf16`: bf16 base weights on CPUs with native bf16, float32 elsewhere; LoRA weights and AdamW state float32."""

from __future__ import annotations

import logging

import pytest
import torch
from trl import ModelConfig

from grpo_ext import policy_loading
from grpo_ext.assembly import build_grpo_trainer
from grpo_ext.errors import UserError
from grpo_ext.policy_loading import cpu_bf16_support, resolve_cpu_bf16
from tests.trainer_utils import TASK, tiny_args


def lora_model_args(**overrides) -> ModelConfig:
    fields = {"model_name_or_path": "embedded", "dtype": "float32", "use_peft": True, "lora_r": 4, "lora_alpha": 8}
    return ModelConfig(**(fields | overrides))


@pytest.fixture
def native_bf16(monkeypatch):
    """Pretend the CPU lists `avx512_bf16` (or, with `native_bf16(False)`, only plain AVX512 flags)."""

    def set_native(on: bool = True):
        flags = {"avx512f", "avx512bw"} | ({"avx512_bf16"} if on else set())
        monkeypatch.setattr(policy_loading, "_cpu_flags", lambda: flags)

    set_native(True)
    return set_native


def test_support_needs_a_native_bf16_flag_not_mkldnn(native_bf16, monkeypatch):
    native_bf16(False)
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)  # emulated bf16 says True
    assert cpu_bf16_support() == {"supported": False, "flags": [], "mkldnn_bf16": True}
    for flag in ("avx512_bf16", "amx_bf16", "bf16"):
        monkeypatch.setattr(policy_loading, "_cpu_flags", lambda flag=flag: {"sse2", flag})
        assert cpu_bf16_support()["supported"] and cpu_bf16_support()["flags"] == [flag]


@pytest.mark.parametrize(
    ("mode", "native", "given", "chosen"),
    [
        ("auto", True, "float32", "bfloat16"),
        ("auto", False, "float32", "float32"),
        ("auto", False, "bfloat16", "float32"),  # auto decides on a CPU: emulated bf16 falls back to float32
        ("on", False, "float32", "bfloat16"),
        ("off", True, "float32", "float32"),
        ("off", False, "bfloat16", "bfloat16"),  # off keeps TRL's dtype as given (with a warning: emulated here)
        ("off", True, "bfloat16", "bfloat16"),
    ],
)
def test_the_choice_and_its_log_line(native_bf16, capsys, caplog, mode, native, given, chosen):
    native_bf16(native)
    model_args = lora_model_args(dtype=given)
    with caplog.at_level(logging.INFO, logger="grpo_ext.policy_loading"):
        assert resolve_cpu_bf16(model_args, tiny_args(cpu_bf16=mode)) == chosen
    assert model_args.dtype == chosen  # the run's record says what ran
    said = caplog.text + capsys.readouterr().out
    if mode == "off":
        assert "cpu_bf16: off" not in said  # no choice made
        # bf16 kept as given on a CPU that emulates it: said, as a warning
        assert ("emulated" in caplog.text) == (given == "bfloat16" and not native)
    else:
        assert f"cpu_bf16: {mode}:" in said and f"base weights in {chosen}" in said
        assert ("no native bf16" in said) == (not native)
    if mode == "on" and not native:
        assert "emulated" in caplog.text  # a warning: slower than float32 here


def test_ignored_on_a_gpu(native_bf16, monkeypatch, caplog):
    monkeypatch.setattr(policy_loading, "on_gpu", lambda training_args=None: True)
    model_args = lora_model_args(dtype="bfloat16")
    with caplog.at_level(logging.INFO, logger="grpo_ext.policy_loading"):
        assert resolve_cpu_bf16(model_args, tiny_args(cpu_bf16="auto")) == "bfloat16"
    assert "ignored on a GPU" in caplog.text


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"use_peft": False}, "use_peft"),
        ({"load_in_4bit": True}, "load_in_4bit"),
        ({"load_in_8bit": True}, "load_in_8bit"),
    ],
)
def test_refused_without_lora_or_with_a_quantised_base(native_bf16, overrides, named):
    with pytest.raises(UserError, match=rf"^cpu_bf16: .*{named}"):
        resolve_cpu_bf16(lora_model_args(**overrides), tiny_args(cpu_bf16="auto"))


def test_the_field_is_validated():
    with pytest.raises(UserError, match=r"^cpu_bf16: unknown value 'yes'; expected one of off, auto, on"):
        tiny_args(cpu_bf16="yes")
    assert tiny_args().cpu_bf16 == "off"  # the default keeps TRL's dtype


def alternating_reward(completions, **kwargs) -> list[float]:
    """1 for every other completion: every group has reward variance (so the step has a gradient), even when the
    confident embedded model samples one completion for all."""
    return [float(i % 2) for i in range(len(completions))]


def test_a_step_on_a_bf16_base_keeps_lora_and_adamw_state_in_float32(native_bf16, tmp_path):
    """PEFT upcasts the adapters of a bf16 base (autocast_adapter_dtype=True, which TRL keeps off ZeRO-3), so the
    trained weights and AdamW's moments are float32 while every frozen weight is bf16; the step trains them."""
    args = tiny_args(
        tmp_path=tmp_path, cpu_bf16="auto", max_steps=1, per_device_train_batch_size=4, max_completion_length=6
    )
    trainer = build_grpo_trainer(
        TASK, args, model_args=lora_model_args(), train_size=8, reward_funcs=[alternating_reward]
    )
    frozen = {p.dtype for p in trainer.model.parameters() if not p.requires_grad}
    lora = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    assert frozen == {torch.bfloat16} and {p.dtype for p in lora.values()} == {torch.float32}
    trainer.train()
    state = [v for s in trainer.optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1]
    assert state and {v.dtype for v in state} == {torch.float32}
    after = dict(trainer.model.named_parameters())
    assert all(after[n].dtype == torch.float32 for n in lora)
    assert trainer.state.log_history[0]["grad_norm"] > 0
    assert any(not torch.equal(after[n].detach(), lora[n]) for n in lora if "lora_B" in n)  # it learned something


def test_compact_cpu_log_probs_are_trls_log_probs(tiny_char_llama, monkeypatch):
    """TRL's fused head on a CPU scores every position unless compacted; compacted, only the labelled (completion)
    positions are projected: the same log-probs, entropies and LoRA-free input gradients, to float rounding."""
    import trl.trainer.utils as trl_utils
    from trl.trainer.utils import add_fused_lm_head

    assert policy_loading.compact_log_probs_on_cpu() and policy_loading.compact_log_probs_on_cpu()  # idempotent
    assert trl_utils._use_triton.grpo_ext_cpu_compact and not trl_utils._use_triton.__wrapped__(torch.device("cpu"))
    model, _ = tiny_char_llama()
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    ids = torch.randint(3, model.config.vocab_size, (3, 12))
    labels = ids.clone()
    labels[:, :7] = -100  # a 7-token prompt, 5 completion tokens
    labels[2, 10:] = -100  # a shorter completion

    rows = []
    apply = trl_utils._ChunkedLogProbFunction.apply
    monkeypatch.setattr(
        trl_utils._ChunkedLogProbFunction, "apply", lambda hidden, *a: rows.append(len(hidden)) or apply(hidden, *a)
    )

    def run(compact: bool):
        monkeypatch.setattr(policy_loading, "CPU_COMPACT_LOG_PROBS", compact)
        model.zero_grad(set_to_none=True)
        out = model(input_ids=ids, labels=labels, fused_lm_head=True)
        (out.log_probs.sum() + out.entropy.sum()).backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return out.log_probs.detach(), out.entropy.detach(), grads

    full, compact = run(False), run(True)
    assert rows == [3 * 11, int((labels[:, 1:] != -100).sum())]  # every shifted position, then the labelled ones
    for a, b in zip(full, compact, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert (full[0][:, :6] == 0).all() and (full[0][:, 6:9] != 0).all()  # prompt positions are zeros in both
