"""Issue 50's experiment as shipped: configs/real/iterative.yaml parses, fits its budget, states its expectations; the
start's hash is enforced; the LoRA PRM on a bf16 body is what is saved and scored; a LoRA policy's merge keeps the
update; the rehearsal (`make iterative-real-quick`) runs end to end on a tiny model with a chat tokenizer."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
import torch

from grpo_ext.errors import UserError

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "configs" / "real" / "iterative.yaml"


def parse(*flags):
    import scripts.iterative as script

    return script.parse_args(["--config", str(CONFIG), *flags])


# ---- the config -------------------------------------------------------------------------------------------------
def test_the_real_config_is_the_studys_stage_with_three_arms_and_its_expectations():
    it_args, training_args, model_args = parse()
    assert it_args.arm_list == ["iterative", "frozen", "verifier"]
    assert len(it_args.seed_list) >= 2 and it_args.collapse_guard_margin is None
    assert it_args.task_kwargs["num_fewshot"] == 0 and it_args.task_kwargs["balance_operations"] is True
    assert training_args.stop_strings == ["Question:"] and training_args.max_completion_length == 64
    assert training_args.temperature == 0.7 and it_args.train_offset == 1536  # after the start's prompts
    assert model_args.model_name_or_path == "results/sft_study/start/model" and model_args.use_peft
    assert it_args.reward_model_type == "process" and it_args.rm_lora_r > 0
    assert it_args.rm_dtype == model_args.dtype == "float32"  # as the SFT study's arms
    wanted = {("iterative", "frozen"), ("verifier", "iterative"), ("iterative", "base")}
    assert {(e["arm"], e["against"]) for e in it_args.expectations.values()} == wanted


def test_the_real_config_fits_twelve_core_hours_and_three_seeds_would_not():
    from grpo_ext.experiments.iterative.budget import estimate

    it_args, training_args, _ = parse()
    result = estimate(it_args, training_args)
    assert result["limit_core_hours"] == 12 and result["core_hours"] <= 12
    # every arm gets the same GRPO budget; only the iterative arm pays for RM training
    rows = {r["what"].split(" ")[0]: r for r in result["rows"]}
    assert len({rows[a]["grpo_core_seconds"] for a in ("iterative", "frozen", "verifier")}) == 1
    assert rows["iterative"]["rm_train_core_seconds"] > 0 == rows["frozen"]["rm_train_core_seconds"]
    three = estimate(*parse("--seeds", "0,1,2")[:2])
    assert math.isclose(three["core_hours"], result["core_hours"] * 1.5)


def test_sampling_is_priced_by_prompt_and_by_sample():
    """A prompt's fixed cost (its prefill) plus each sample's, by hand: 300 test prompts x 8 samples at 1 s a prompt
    and 0.01 s a sample is 324 s an evaluation; the RM's data (128 prompts x 4) is 133.12 s; the measurement sets
    (64 + 64 prompts x 2) are 130.56 s."""
    from grpo_ext.experiments.iterative.budget import estimate

    rates = {"grpo_seconds_per_sequence": 1, "rm_seconds_per_record": 1, "rm_scores_per_second": 1}
    rates.update(core_hours=12, sampling_seconds_per_prompt=1.0, sampling_seconds_per_sample=0.01)
    flags = ["--rm_prompts", "128", "--rm_samples_per_prompt", "4", "--rm_eval_prompts", "64"]
    flags += ["--rm_heldout_prompts", "64", "--rm_eval_samples_per_prompt", "2", "--eval_prompts", "300"]
    it_args, training_args, _ = parse("--budget", json.dumps(rates), "--eval_samples", "8", *flags)
    rows = {r["what"].split(" ")[0]: r for r in estimate(it_args, training_args)["rows"]}
    runs = rows["frozen"]["runs"]
    assert rows["frozen"]["test_core_seconds"] == pytest.approx(runs * 324.0)
    assert rows["frozen"]["sampling_core_seconds"] == pytest.approx(runs * 130.56)
    assert rows["iterative"]["sampling_core_seconds"] == pytest.approx(runs * (130.56 + 133.12))
    assert rows["iteration"]["sampling_core_seconds"] == pytest.approx(rows["iteration"]["runs"] * (130.56 + 133.12))


def test_an_estimate_without_planning_rates_names_the_missing_ones():
    from grpo_ext.experiments.iterative.budget import estimate

    it_args, training_args, _ = parse("--budget", '{"core_hours": 12, "sampling_seconds_per_prompt": 0.9}')
    with pytest.raises(UserError, match="budget.grpo_seconds_per_sequence"):
        estimate(it_args, training_args)


def test_spent_core_hours_counts_a_seeds_shared_iteration_0_once():
    from grpo_ext.experiments.iterative.budget import spent_core_hours

    start = {"iteration": 0, "seconds": 3600.0}
    states = {arm: {0: {"history": [start, {"iteration": 1, "seconds": 1800.0}]}} for arm in ("iterative", "frozen")}
    assert spent_core_hours(states) == pytest.approx(2.0)


# ---- the start's hash -------------------------------------------------------------------------------------------
def _study_start(tmp_path) -> Path:
    from safetensors.torch import save_file

    folder = tmp_path / "start" / "model"
    folder.mkdir(parents=True)
    save_file({"w": torch.ones(2)}, str(folder / "model.safetensors"))
    return folder


def test_a_study_start_must_be_named_and_another_start_is_refused(tmp_path):
    from grpo_ext.experiments.iterative.experiment import check_start
    from grpo_ext.experiments.study.start import weights_hash

    folder = _study_start(tmp_path)
    sha = weights_hash(folder)
    (folder.parent / "start.json").write_text(json.dumps({"model_sha256": sha}))
    with pytest.raises(UserError, match=f"start_sha256: {sha}"):  # the record's hash, to copy into the config
        check_start(folder, None)
    check_start(folder, sha)
    with pytest.raises(UserError, match="another start"):
        check_start(folder, "0" * 64)


def test_start_sha256_must_look_like_a_sha256():
    with pytest.raises(UserError, match="start_sha256"):
        parse("--start_sha256", "abc")


# ---- the LoRA PRM on a bf16 body --------------------------------------------------------------------------------
def _records(n: int) -> list[dict]:
    # chat prompts, as the real task gives them: the RM reads the question (their last message) and the answer
    prompt = [{"role": "user", "content": "Ann has 3 apples and gets 4 more. How many?"}]
    out = []
    for i in range(n):
        good = i % 2 == 0
        completion = "3 + 4 = 7\n#### 7" if good else "3 + 4 = 9\n#### 9"
        out.append({"id": str(i), "prompt": prompt, "completion": completion, "label": int(good),
                    "step_labels": [float(good), float(good)]})  # fmt: skip
    return out


def test_the_lora_prm_learns_and_the_saved_folder_is_the_model_measured(tmp_path, tiny_chat_tokenizer):
    from grpo_ext.experiments.iterative.rm_training import evaluate_reward_model, init_reward_model, train_reward_model
    from grpo_ext.experiments.study.rehearsal import tiny_model_like
    from grpo_ext.rewards.prm import ProcessRewardModel

    base = tiny_model_like(tiny_chat_tokenizer, tmp_path / "tiny")
    rm, tokenizer = init_reward_model("process", base, "policy", seed=0, dtype="bfloat16", lora_r=8)
    records = _records(32)
    before = evaluate_reward_model("process", rm, tokenizer, records, "\n")["auc"]
    train_reward_model(
        "process", rm, tokenizer, records, tmp_path / "rm", separator="\n", epochs=4, learning_rate=5e-3,
        batch_size=8, lora_r=8, dtype="bfloat16",
    )  # fmt: skip
    after = evaluate_reward_model("process", rm, tokenizer, records, "\n")
    assert after["auc"] > max(before, 0.9)
    # a plain token-classification folder in bf16 (no adapter files): what the policy's trainer loads
    assert not (tmp_path / "rm" / "adapter_config.json").exists()
    assert all(p.dtype == torch.bfloat16 for p in rm.parameters())
    prm = ProcessRewardModel(tmp_path / "rm", "\n", dtype=torch.bfloat16)
    prompts, completions = [r["prompt"] for r in records[:4]], [r["completion"] for r in records[:4]]
    in_memory = ProcessRewardModel(step_separator="\n", model=rm, tokenizer=tokenizer)
    saved, measured = prm(prompts=prompts, completions=completions), in_memory(prompts=prompts, completions=completions)
    # the same weights; a bf16 model loaded from disk rebuilds its rotary buffers, so the scores agree to bf16's grain
    assert [s for row in saved for s in row] == pytest.approx([s for row in measured for s in row], abs=2e-3)


def test_a_bf16_rm_without_lora_is_refused(tmp_path, tiny_chat_tokenizer):
    from grpo_ext.experiments.iterative.rm_training import init_reward_model
    from grpo_ext.experiments.study.rehearsal import tiny_model_like

    base = tiny_model_like(tiny_chat_tokenizer, tmp_path / "tiny")
    with pytest.raises(UserError, match="rm_dtype"):
        init_reward_model("process", base, "policy", dtype="bfloat16", lora_r=0)


# ---- the LoRA policy's merge ------------------------------------------------------------------------------------
def test_merging_a_policy_adapter_keeps_its_update_and_says_what_rounding_lost(tmp_path, tiny_chat_tokenizer):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from grpo_ext.experiments.iterative.policy import merge_adapter
    from grpo_ext.experiments.study.rehearsal import tiny_model_like

    base = tiny_model_like(tiny_chat_tokenizer, tmp_path / "tiny")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base), LoraConfig(r=4, target_modules="all-linear"))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)  # a trained adapter: its update is far above bf16's spacing
    model.save_pretrained(tmp_path / "adapter")
    ids = torch.tensor([[3, 5, 7, 9]])
    expected = model(input_ids=ids).logits
    info = merge_adapter(tmp_path / "adapter", tmp_path / "merged", base, "float32")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    torch.testing.assert_close(merged(input_ids=ids).logits, expected, atol=1e-4, rtol=1e-4)
    assert info["update_norm"] > 0 and info["rounding_error"] == 0.0  # float32 keeps all of it
    rounded = merge_adapter(tmp_path / "adapter", tmp_path / "merged_bf16", base, "bfloat16")
    assert 0.0 < rounded["rounding_error"] < 0.05  # bf16 keeps most of a large update
    assert (tmp_path / "merged_bf16" / "tokenizer_config.json").is_file()


# ---- the rehearsal ----------------------------------------------------------------------------------------------
def _mtime(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


@pytest.mark.slow
def test_the_quick_rehearsal_runs_every_arm_and_reports_the_studys_numbers(tmp_path, python, tiny_chat_tokenizer):
    from grpo_ext.experiments.study.rehearsal import REHEARSAL_VOCAB

    shared = ROOT / "outputs" / "tiny_models" / f"iterative-{tiny_chat_tokenizer.name}-{REHEARSAL_VOCAB}"
    shared_before = _mtime(shared / "model.safetensors")  # None: there is none (a checkout's from before may be)
    out = tmp_path / "quick"
    command = [python, "scripts/iterative.py", "--config", str(CONFIG), "--quick", "--output_dir", str(out)]
    command += ["--rehearsal-tokenizer", str(tiny_chat_tokenizer)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "rehearsal_start" / "start.json").read_text())
    # the tiny model of a tokenizer given: in the run's own folder, never in the repository's outputs/ (two test
    # workers, or two rehearsals, on tokenizer folders of one name shared one folder there)
    assert (out / "rehearsal_start" / shared.name / "model.safetensors").is_file()
    assert _mtime(shared / "model.safetensors") == shared_before  # not made, nor made again, in outputs/
    report = json.loads((out / "report" / "report.json").read_text())
    assert set(report["rows"]) == {"iterative", "frozen", "verifier"}
    for seeds in report["rows"].values():
        assert set(seeds) == {"0", "1"} and all(len(rows) == 3 for rows in seeds.values())  # iterations 0, 1, 2
        for rows in seeds.values():
            assert all(r["reference_reset"] is True for r in rows[1:])  # a fresh adapter on the previous policy
            assert all(r["merge"]["dtype"] == parse()[2].dtype for r in rows[1:])  # merged in the policy's dtype
    assert report["config"]["start_sha256"] == record["model_sha256"]
    found = report["findings"]
    assert [e["name"] for e in found["expectations"]] == list(parse()[0].expectations)
    assert set(found["per_operation"]["iterative"]) == {"+", "-"}
    assert set(found["anatomy"]) == {"start", "iterative", "frozen", "verifier"}
    # the iterative arm's RM was retrained and measured again; the frozen arm's was not
    iterative = report["rows"]["iterative"]["0"][1]
    assert iterative["n_new"] > 0 and "rm_accuracy_after" in iterative
    assert "rm_accuracy_after" not in report["rows"]["frozen"]["0"][1]
    # started again, it redoes nothing
    again = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "iteration 1/2" not in again.stdout
