"""scripts/publish.py and grpo_ext.hub: adapters and merged exports for the Hub, model cards with eval results."""

import json
import os
import shutil
import subprocess
import textwrap

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import ModelConfig

from grpo_ext.evaluation.report import write_reports
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.policy_loading import ALL_LINEAR
from grpo_ext.run_record import save_resolved_config
from grpo_ext.script_args import TaskArguments
from scripts import publish
from tests.trainer_utils import TASK, tiny_args

MODEL = str(EMBEDDED_MODEL_DIR)
PROMPTS = [row["prompt"] for row in TASK.load("test", 6)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A QLoRA run's output folder as scripts/train.py leaves it: adapter, tokenizer, resolved config, state."""
    folder = tmp_path_factory.mktemp("run") / "qlora"
    base = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    torch.manual_seed(0)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=ALL_LINEAR, init_lora_weights=False))
    with torch.no_grad():  # a trained-looking adapter: moves the outputs without wrecking them
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(0.3)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(MODEL).save_pretrained(folder)
    model_args = ModelConfig(
        model_name_or_path=MODEL,
        load_in_4bit=True,
        use_bnb_nested_quant=True,
        use_peft=True,
        lora_r=8,
        lora_alpha=16,
        lora_target_modules=ALL_LINEAR,
    )
    training = tiny_args(
        tmp_path=folder,
        max_steps=40,
        beta=0.04,
        advantage_mode="process",
        process_reward_funcs=["grpo_ext.tasks.arithmetic.step_reward"],
        zero_std_groups="skip",
    )
    save_resolved_config(
        str(folder), TaskArguments(task="arithmetic", task_kwargs={"max_operands": 3}), training, model_args
    )
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 37}))
    return folder


def harness_result(model: str, fingerprint: str | None) -> dict:
    """What the harness reports for `model` (its numbers made up, and possible)."""
    return {
        "model": model,
        "model_fingerprint": fingerprint,
        "backend": "transformers",
        "task": "arithmetic",
        "task_id": "arithmetic:test",
        "split": "test",
        "n_problems": 200,
        "n": 16,
        "ks": [1, 4, 16],
        "dropped_ks": [],
        "warnings": [],
        "params": {"n": 16, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 48, "seed": 0, "batch_size": 16},
        "params_key": "k",
        "pass@k": {"1": 0.5625, "4": 0.8125, "16": 0.95},
        "maj@k": {"1": 0.5625, "4": 0.625, "16": 0.7},
        "mean_accuracy": 0.5625,
        "answers_extracted": 0.99,
        "samples": {"total": 3200, "from_cache": 0, "generated": 3200, "seconds": 10.0, "samples_per_second": 320.0},
        "per_problem": [],
    }


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory, checkpoint):
    """An evaluation harness report (written by grpo_ext.evaluation.report) for the checkpoint."""
    from grpo_ext.evaluation.backends import load_fingerprint

    folder = tmp_path_factory.mktemp("eval")
    write_reports([harness_result("outputs/qlora", load_fingerprint(str(checkpoint)))], folder)
    return folder


def leftovers(parent, name):
    return [p.name for p in parent.iterdir() if p.name.startswith(name) or p.name.startswith(f".{name}")]


def greedy(model, tokenizer):
    out = []
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        generated = model.generate(**ids, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        out.append(generated[0, ids["input_ids"].shape[1] :].tolist())
    return out


def test_merged_export_loads_without_peft_and_matches_base_plus_adapter(checkpoint, tmp_path, python, root, capsys):
    out = tmp_path / "merged"
    publish.main([str(checkpoint), "--repo-id", "me/merged", "--merge", "--dry-run", "--output-dir", str(out)])
    assert capsys.readouterr().out.strip() == str(out)  # prints the folder's path
    files = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "grpo_ext_config.yaml"} <= files
    assert not any(name.startswith("adapter_") for name in files)
    assert "quantization_config" not in json.loads((out / "config.json").read_text())

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32), checkpoint)
    expected = greedy(reference.eval(), tokenizer)
    with reference.disable_adapter():
        assert greedy(reference, tokenizer) != expected  # the adapter matters, so the comparison means something

    # A fresh interpreter where peft and bitsandbytes cannot be imported: plain transformers loads the export.
    script = textwrap.dedent(f"""
        import json, sys
        sys.modules["peft"] = sys.modules["bitsandbytes"] = None  # `import peft` fails, find_spec says absent
        from transformers import AutoModelForCausalLM, AutoTokenizer
        model = AutoModelForCausalLM.from_pretrained({str(out)!r}).eval()
        tok = AutoTokenizer.from_pretrained({str(out)!r})
        out = []
        for prompt in {PROMPTS!r}:
            ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
            gen = model.generate(**ids, max_new_tokens=24, do_sample=False, pad_token_id=tok.pad_token_id)
            out.append(gen[0, ids["input_ids"].shape[1]:].tolist())
        assert sys.modules["peft"] is None and sys.modules["bitsandbytes"] is None
        print(json.dumps(out))
    """)
    proc = subprocess.run([python, "-c", script], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == expected

    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "transformers"
    assert "merged" in card.text and "no PEFT and no bitsandbytes" in card.text


def test_dry_run_card_parses_and_carries_the_eval_report(checkpoint, report_dir, tmp_path):
    out = tmp_path / "adapter"
    publish.main(
        [
            str(checkpoint),
            "--repo-id",
            "me/qlora-arith",
            "--eval-report",
            str(report_dir),
            "--dry-run",
            "--output-dir",
            str(out),
            "--base-model",
            "Qwen/Qwen2.5-1.5B",
        ]
    )
    assert {p.name for p in out.iterdir()} == {
        ".grpo_ext_folder.json",  # its writer and files: what --overwrite may replace later; not uploaded
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
        "grpo_ext_config.yaml",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == "Qwen/Qwen2.5-1.5B"

    card = ModelCard.load(out / "README.md")
    data = card.data
    assert data.base_model == "Qwen/Qwen2.5-1.5B" and data.library_name == "peft"
    assert data.pipeline_tag == "text-generation" and data.license
    assert {"trl", "grpo", "qlora", "lora", "process-supervision"} <= set(data.tags)
    results = {(r.metric_type, r.metric_value) for r in data.eval_results}
    report = json.loads((report_dir / "report.json").read_text())["models"][0]
    expected = {(f"pass@{k}", v) for k, v in report["pass@k"].items()}
    expected |= {(f"maj@{k}", v) for k, v in report["maj@k"].items()}
    assert results == expected
    assert all(r.dataset_split == "test" and r.metric_args["n"] == 16 for r in data.eval_results)
    text = card.text
    for fragment in (
        "process supervision (DeepSeekMath 4.1.3)",  # the registry record's description
        "step rewards from grpo_ext.tasks.arithmetic.step_reward",
        "zero-std groups: skip",
        "training steps: 37",
        "4-bit nf4 with double quantisation",
        "r=8",
        "PeftModel.from_pretrained",
        "| 16 | 0.950 | 0.700 |",
    ):
        assert fragment in text


def test_upload_sends_the_same_folder_and_cleans_up(checkpoint, monkeypatch, capsys):
    calls = {}

    class FakeApi:
        def create_repo(self, repo_id, private, exist_ok, repo_type):
            calls["create"] = (repo_id, private)
            return f"https://huggingface.co/{repo_id}"

        def upload_folder(self, repo_id, folder_path, commit_message, repo_type):
            calls["files"] = sorted(os.listdir(folder_path))
            calls["folder"] = folder_path
            calls["card"] = ModelCard.load(os.path.join(folder_path, "README.md")).data.to_dict()

    monkeypatch.setattr("huggingface_hub.HfApi", FakeApi)
    publish.main([str(checkpoint), "--repo-id", "me/qlora-arith", "--private"])
    assert calls["create"] == ("me/qlora-arith", True)
    assert "adapter_model.safetensors" in calls["files"] and "README.md" in calls["files"]
    assert "qlora" in calls["card"]["tags"]
    assert not os.path.exists(calls["folder"])  # the staging folder is gone
    assert "https://huggingface.co/me/qlora-arith" in capsys.readouterr().out


def test_full_model_checkpoint_publishes_without_merge(tmp_path):
    model_dir = tmp_path / "full"
    shutil.copytree(MODEL, model_dir)
    out = tmp_path / "full-hub"
    publish.main([str(model_dir), "--repo-id", "me/full", "--dry-run"])
    assert (out / "model.safetensors").is_file() and (out / "config.json").is_file()
    assert ModelCard.load(out / "README.md").data.library_name == "transformers"


@pytest.mark.parametrize(
    "make, extra, message",
    [
        (lambda d: None, [], "holds neither a LoRA adapter"),
        (lambda d: (d / "adapter_config.json").write_text("{}"), [], "has adapter_config.json but no adapter weights"),
        (lambda d: (d / "config.json").write_text("{}"), [], "has config.json but no model weights"),
        (lambda d: shutil.copytree(MODEL, d, dirs_exist_ok=True), ["--merge"], "--merge: .* holds full model weights"),
        ("checkpoint", ["--eval-report", "/nonexistent/eval"], "--eval-report: no such file or folder"),
        ("checkpoint", ["--eval-report", "EMPTY"], r"--eval-report: .*empty holds no report\.json"),
        ("checkpoint", ["--eval-report", "BAD"], "not valid JSON"),
        ("checkpoint", ["--repo-id", "not a/valid/repo"], "--repo-id"),
    ],
)
def test_bad_input_is_refused_and_leaves_nothing_behind(tmp_path, checkpoint, make, extra, message):
    if make == "checkpoint":
        folder = checkpoint
    else:
        folder = tmp_path / "ckpt"
        folder.mkdir()
        make(folder)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "report.json").write_text("{not json")
    extra = [{"EMPTY": str(tmp_path / "empty"), "BAD": str(tmp_path / "bad")}.get(a, a) for a in extra]
    out = tmp_path / "out"
    with pytest.raises((ValueError, FileNotFoundError), match=message):  # what run_cli prints as one line
        publish.main([str(folder), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out), *extra])
    assert leftovers(tmp_path, "out") == []


def test_crash_while_writing_leaves_no_folder_that_looks_complete(checkpoint, tmp_path, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr("grpo_ext.hub.upload_folder.build_model_card", explode)
    with pytest.raises(RuntimeError, match="disk full"):
        publish.main([str(checkpoint), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp_path / "out")])
    assert leftovers(tmp_path, "out") == []


def test_cli_error_is_one_line(python, root, tmp_path):
    proc = subprocess.run(
        [python, "scripts/publish.py", str(tmp_path), "--repo-id", "me/x", "--dry-run"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: CHECKPOINT:" in proc.stderr and "holds neither a LoRA adapter" in proc.stderr


def test_trained_with_reads_the_resolved_config(checkpoint):
    from grpo_ext.hub import trained_with

    summary = trained_with(checkpoint)
    assert summary["steps"] == 37 and summary["task"] == "arithmetic" and summary["dataset"] is None
    assert summary["quantization"].startswith("4-bit nf4") and summary["lora"]["r"] == 8
    assert yaml.safe_load((checkpoint / "grpo_ext_config.yaml").read_text())["training"]["beta"] == 0.04
    assert summary["hyperparameters"]["KL coefficient beta"] == 0.04


@pytest.mark.parametrize("name", ["embedded", "smollm2-135m-instruct"])
def test_an_adapter_on_a_model_grpo_ext_names_is_published_naming_that_model_not_this_machines_folder(
    checkpoint, tmp_path, monkeypatch, name
):
    from grpo_ext.real_model_fetch import real_model_dir

    monkeypatch.setenv("GRPO_EXT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "run"
    shutil.copytree(checkpoint, folder)
    local = MODEL if name == "embedded" else str(real_model_dir(name))  # what PEFT recorded when it loaded the base
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": local}))
    out = tmp_path / "up"
    publish.main([str(folder), "--repo-id", "me/x", "--dry-run", "--output-dir", str(out)])
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == name
    assert local not in (out / "README.md").read_text() and local not in (out / "adapter_config.json").read_text()
