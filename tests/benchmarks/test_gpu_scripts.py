"""The GPU benchmarks, the GPU smoke check and the no-vLLM GPU config, on the CPU: what they do without CUDA (say so,
write nothing, exit 0), every code path rehearsed on tiny models, and the smoke check's commands parsed as its
scripts parse them. The CUDA runs themselves need a GPU (issue 21); these tests pass on CUDA machines too."""

import json
import math
import types
from pathlib import Path

import pytest
import torch
import yaml

from benchmarks import _common, _gpu, gpu_sampling, gpu_step
from scripts import gpu_check


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def results_dir(monkeypatch, tmp_path):
    """Where the benchmarks would write (a CPU run must leave the committed GPU results alone)."""
    folder = tmp_path / "results"
    folder.mkdir()
    monkeypatch.setattr(_common, "RESULTS_DIR", folder)
    return folder


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return _gpu.build_random_model("tiny", tmp_path_factory.mktemp("models") / "tiny", device="cpu")


# ---- without CUDA ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("module, argv", [(gpu_sampling, []), (gpu_step, []), (gpu_step, ["--shapes", "1.5b"])])
def test_benchmarks_without_cuda_say_why_and_write_nothing(module, argv, no_cuda, results_dir, capsys):
    out = module.main(argv)
    printed = capsys.readouterr().out
    assert "needs a CUDA GPU" in printed and "torch.cuda.is_available() is False" in printed
    assert "nothing written" in printed.lower()
    assert out == {"skipped": _gpu.cuda_unavailable_reason()}
    assert list(results_dir.iterdir()) == []


def test_gpu_check_without_cuda_reports_every_step_skipped(no_cuda, tmp_path, capsys):
    assert gpu_check.main(["--workdir", str(tmp_path / "w")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("gpu-check needs a CUDA GPU")
    names = ["packages", "prepare", *(step.name for step in gpu_check.plan(tmp_path, cpu=False))]
    assert [line for line in lines if line.startswith("skipped")] == [f"skipped (no CUDA)  {n}" for n in names]
    assert not (tmp_path / "w").exists()  # nothing was built or run


# ---- gpu_sampling ------------------------------------------------------------------------------------------------


def test_parse_configs():
    assert gpu_sampling.parse_configs("8x16, 32X16") == [(8, 16), (32, 16)]
    for bad in ("8", "8x", "0x16", "8xa"):
        with pytest.raises(SystemExit, match="--configs"):
            gpu_sampling.parse_configs(bad)


def test_gpu_sampling_rehearsal_times_every_side(results_dir, capsys):
    argv = ["--device", "cpu", "--shape", "tiny", "--configs", "2x4,3x2", "--max-new-tokens", "6", "--reps", "2"]
    payload = gpu_sampling.main([*argv, "--no-vllm"])
    assert list(results_dir.iterdir()) == []  # a rehearsal prints, never writes
    assert "CPU rehearsal, not written" in capsys.readouterr().out
    assert payload["device"]["name"] == "cpu" and payload["params"]["vocab_size"] == 1000
    sides = {"ours", "ours_static", "ours_compiled", "generate", "generate_static"}
    for res, (prompts, n) in zip(payload["results"], [(2, 4), (3, 2)], strict=True):
        assert res["slots"] == prompts * n and res["vllm"] == "disabled (--no-vllm)"
        assert set(res["seconds"]) == set(res["warmup_seconds"]) == sides
        assert all(res["seconds"][s]["n"] == 2 and res["seconds"][s]["median"] > 0 for s in sides)
        for side in sides:
            median = res["seconds"][side]["median"]
            assert res["ms_per_decode_step"][side] == pytest.approx(median / 6 * 1e3)
            assert res["samples_per_second"][side] == pytest.approx(prompts * n / median)
        assert set(res["time_over_ours"]) == sides - {"ours"}
        assert set(res["time_over_generate_static"]) == sides - {"generate_static"}
        assert res["same_samples_as_ours"] == {"ours_static": 1.0, "ours_compiled": 1.0}  # float32 on the CPU
        assert all(0 < length <= 6 for length in res["generate_mean_new_tokens"].values())
    assert payload["params"]["compile_options"] == {"backend": "eager", "fullgraph": False, "dynamic": None}


def test_gpu_sampling_records_a_failing_side_and_times_the_others(capsys):
    calls = []

    def compiler_missing(r):
        raise RuntimeError("no C compiler")

    warmup, times, errors = gpu_sampling.measure(
        {"ours": calls.append, "generate_static": compiler_missing}, torch.device("cpu"), reps=3
    )
    assert errors == {"generate_static": "RuntimeError: no C compiler"}
    assert set(warmup) == set(times) == {"ours"} and len(times["ours"]) == 3 and calls == [-1, 0, 1, 2]
    assert (
        gpu_sampling.table(
            [{"prompts": 2, "samples_per_prompt": 4, "slots": 8, "errors": errors, "seconds": {}}]
        ).count("failed: RuntimeError: no C compiler")
        == 1
    )


def test_gpu_sampling_sides_return_every_sample(tiny_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    prompts, lengths = ["12+3=", "4-56+7="], []
    ours = gpu_sampling.make_ours(model, tokenizer, prompts, 3, 5)(0)
    assert [len(samples) for samples in ours] == [3, 3]
    assert gpu_sampling.make_ours(model, tokenizer, prompts, 3, 5, "static")(0) == ours  # same samples
    assert gpu_sampling.parse_decodes("eager, compiled") == ["eager", "compiled"]
    with pytest.raises(SystemExit, match="--decodes"):
        gpu_sampling.parse_decodes("eager,graphs")
    texts = gpu_sampling.make_generate(model, tokenizer, prompts, 3, 5, True, lengths)(0)
    assert len(texts) == 6 and len(lengths) == 1 and 0 < lengths[0] <= 5


# ---- gpu_step ----------------------------------------------------------------------------------------------------


def test_rewards_with_signal_for_a_random_policy():
    assert gpu_step.token_parity_reward(None, [[2, 3, 4, 5], [1, 3], [0], []]) == [0.5, 0.0, 1.0, 0.0]
    prompts = [f"{a}+{a}=" for a in range(40) for _ in range(4)]  # 40 groups of 4
    ids = [[i, i + 1, 2 * i] for i in range(len(prompts))]
    rewards = _gpu.smoke_reward(prompts=prompts, completion_ids=ids)
    groups = [rewards[g * 4 : (g + 1) * 4] for g in range(40)]
    parity = gpu_step.token_parity_reward(None, ids)
    for g, group in enumerate(groups):  # a prompt is scored for all its completions or for none
        assert group == [0.0] * 4 or group == parity[g * 4 : (g + 1) * 4]
    scored = sum(group != [0.0] * 4 for group in groups)
    assert 10 <= scored <= 30  # about half the groups have signal, the others none (zero-std groups)


def test_gpu_step_builds_each_kind_and_variant_as_documented(tiny_model, tmp_path):
    import bitsandbytes as bnb
    from peft import PeftModel

    settings = gpu_step.settings_for(types.SimpleNamespace(batch=8, group=4, completion=6))
    full = gpu_step.build_trainer(str(tiny_model), "full", "off", settings, "cpu", tmp_path)
    assert not isinstance(full.model, PeftModel) and full.ref_model is not None  # beta 0.04: a reference copy
    assert full.args.beta == gpu_step.BETA and full.args.advantage_mode == "outcome"
    assert full.args.zero_std_groups == "keep" and full.args.kl_controller == "fixed"
    lora = gpu_step.build_trainer(str(tiny_model), "lora", "static", settings, "cpu", tmp_path)
    assert isinstance(lora.model, PeftModel) and lora.ref_model is None
    assert lora.args.cache_implementation == "static" and lora.generation_config.cache_implementation == "static"
    assert not any(isinstance(m, bnb.nn.Linear4bit) for m in lora.model.modules())
    on = gpu_step.build_trainer(str(tiny_model), "qlora", "on", settings, "cpu", tmp_path)
    assert any(isinstance(m, bnb.nn.Linear4bit) for m in on.model.modules())
    assert (on.args.advantage_mode, on.args.zero_std_groups, on.args.kl_controller) == ("process", "skip", "adaptive")
    assert on.args.beta == gpu_step.BETA and on.args.process_include_outcome and on.process_reward_funcs
    sampled = gpu_step.build_trainer(str(tiny_model), "qlora", "sampler", settings, "cpu", tmp_path)
    assert sampled.args.generation_backend == "sampler" and sampled._sampler.decode == "auto"
    assert (sampled.args.advantage_mode, sampled.args.cache_implementation) == ("outcome", None)


def test_gpu_step_rehearsal_times_every_variant(tiny_model):
    settings = gpu_step.settings_for(types.SimpleNamespace(batch=8, group=4, completion=6))
    out = gpu_step.run_kind(str(tiny_model), "qlora", settings, device="cpu", reps=2, warmup=1)
    assert out["errors"] == {} and set(out["variants"]) == set(gpu_step.VARIANTS)
    for name, variant in out["variants"].items():
        warmup = 1 + gpu_step.EXTRA_WARMUP.get(name, 0)
        assert variant["seconds"]["n"] == 2 and len(variant["warmup_seconds"]) == warmup
        assert variant["resident_bytes"] is None and variant["peak_bytes"] is None  # no CUDA allocator on the CPU
        assert len(variant["losses"]) == 2 and all(math.isfinite(x) for x in variant["losses"])
        assert 0 < variant["mean_completion_length"] <= 6
    assert set(out["time_over_off"]) == {"on", "static", "sampler"}
    assert gpu_step.table("tiny", {"qlora": out}).count("| tiny | qlora |") == 4
    assert gpu_step.sampler_target({"qlora": out})["peak_over_off"] is None  # no CUDA peaks: never "met" on a CPU
    assert gpu_step.sampler_target({"qlora": out})["met"] is False and gpu_step.sampler_target({}) is None


# ---- gpu_check ---------------------------------------------------------------------------------------------------


def test_gpu_check_plan_runs_the_main_job_the_harness_each_extension_on_qlora_and_the_gpu_config(tmp_path):
    steps = {step.name: step for step in gpu_check.plan(tmp_path, cpu=False)}
    assert list(steps) == ["main_job", "harness", *gpu_check.EXTENSIONS, "gpu_config"]
    main_job = steps["main_job"].argv
    assert main_job[:9] == ["scripts/train.py", "--config", "configs/qlora.yaml", "--use_cpu", "false", "--bf16",
                            "true", "--max_steps", "5"]  # fmt: skip
    assert steps["harness"].argv[:3] == ["evals/passk_majk.py", "--model", str(tmp_path / "main_job")]
    for name in gpu_check.EXTENSIONS:
        argv = steps[name].argv
        flags = dict(zip(argv[3::2], argv[4::2], strict=False))
        assert (gpu_check.ROOT / argv[2]).is_file()
        assert flags["--model_name_or_path"] == str(tmp_path / "policy") and flags["--load_in_4bit"] == "true"
        assert flags["--use_cpu"] == "false" and flags["--bf16"] == "true" and flags["--max_steps"] == "2"
        assert flags["--dtype"] == "bfloat16" and gpu_check.SMOKE_REWARD in argv
    assert steps["gpu_config"].argv[2] == gpu_check.GPU_CONFIG and "--use_cpu" not in steps["gpu_config"].argv


def test_gpu_check_dry_run_parses_every_step(tmp_path, capsys):
    assert gpu_check.main(["--dry-run", "--workdir", str(tmp_path / "w")]) == 0
    printed = capsys.readouterr().out
    for name in ["packages", "prepare", *(step.name for step in gpu_check.plan(tmp_path, cpu=False))]:
        assert f"PASS  {name} " in printed
    assert "11/11 passed" in printed
    from grpo_ext.tasks import get_task

    rows = [json.loads(line) for line in (tmp_path / "w" / "gsm8k.jsonl").read_text().splitlines()]
    task = get_task("gsm8k", data_files=str(tmp_path / "w" / "gsm8k.jsonl"), conversational=True)
    loaded = task.load("train")
    assert len(loaded) == len(rows) == 64 and isinstance(loaded[0]["prompt"], list)  # a chat, as the config asks
    # each reference is the arithmetic answer, which the task's own checker accepts
    assert all(
        task.outcome_reward([None], [r["answer"]], answer=[loaded[i]["answer"]]) == [1.0] for i, r in enumerate(rows)
    )


def test_gpu_check_prepare_builds_the_policy_in_a_child_process(tmp_path):
    """The GPU path of `prepare` (a child process builds the policy and reports its device), with a CPU stand-in."""
    assert gpu_check.prepare(tmp_path, "tiny", "cpu", in_process=False) == "cpu"
    config = json.loads((tmp_path / "policy" / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["vocab_size"] == _gpu.SHAPES["tiny"]["vocab_size"]
    assert (tmp_path / "prm" / "model.safetensors").is_file() and (tmp_path / "gsm8k.jsonl").is_file()


def test_gpu_check_dry_run_names_a_broken_step(tmp_path, capsys, monkeypatch):
    plan = gpu_check.plan

    def broken(work, cpu):
        steps = plan(work, cpu)
        steps[3].argv += ["--zero_std_groups", "sometimes"]
        steps[1].argv[steps[1].argv.index("--k") + 1] = "1,16"  # k > n
        return steps

    monkeypatch.setattr(gpu_check, "plan", broken)
    assert gpu_check.main(["--dry-run", "--workdir", str(tmp_path / "w")]) == 1
    lines = capsys.readouterr().out.splitlines()
    failed = {line.split()[1]: line for line in lines if line.startswith("FAIL")}
    assert set(failed) == {"harness", "ext_process_prm"}
    assert "zero_std_groups" in failed["ext_process_prm"] and "sometimes" in failed["ext_process_prm"]
    assert "16" in failed["harness"]
    assert lines[-1].startswith("9/11 passed") and lines[-1].endswith("failed: harness, ext_process_prm")


def test_gpu_check_outcome_reads_the_run(tmp_path):
    step = gpu_check.Step("x", ["scripts/train.py"], timeout=1, output=str(tmp_path))
    assert gpu_check.outcome(step, None) == "timed out after 1 s"
    assert gpu_check.outcome(step, 2) == "exit code 2"
    assert "run status None" in gpu_check.outcome(step, 0)
    (tmp_path / "grpo_ext_run.json").write_text(json.dumps({"status": "complete"}))
    state = tmp_path / "trainer_state.json"
    for history, why in [
        ([{"loss": 0.0, "grad_norm": 0.0}, {"loss": 0.0, "grad_norm": 0.0}], "gradient was 0 in every step"),
        ([{"loss": 0.1, "grad_norm": 0.2}, {"loss": float("nan"), "grad_norm": 0.1}], "non-finite loss"),
        ([{"train_runtime": 1.0}], "no training step was logged"),
        ([{"loss": 0.1, "grad_norm": 0.0}, {"loss": -0.2, "grad_norm": 0.3}], None),
    ]:
        state.write_text(json.dumps({"log_history": history}))
        result = gpu_check.outcome(step, 0)
        assert result is None if why is None else why in result
    step.expect_files = ["adapter_model.safetensors"]
    assert gpu_check.outcome(step, 0) == f"missing adapter_model.safetensors in {tmp_path}"


def test_gpu_check_names_missing_and_out_of_range_packages(monkeypatch):
    from importlib import metadata

    real = metadata.version

    def version(name):
        if name == "matplotlib":
            raise metadata.PackageNotFoundError(name)
        return "5.17.0" if name == "transformers" else real(name)

    monkeypatch.setattr(metadata, "version", version)
    why, found = gpu_check.check_packages()
    assert why == "transformers 5.17.0 (pyproject.toml needs <6,>=5.23); matplotlib missing"
    assert "trl " in found and "matplotlib" not in found


# ---- the GPU config without vLLM ---------------------------------------------------------------------------------


def test_no_vllm_gpu_config_is_the_vllm_config_without_vllm(root):
    from grpo_ext.policy_loading import ALL_LINEAR, policy_init
    from grpo_ext.script_args import parse_train_args

    path = root / gpu_check.GPU_CONFIG
    assert "NOT RUN HERE" in path.read_text()  # what its header must say: no GPU or hub was available to run it
    plain = yaml.safe_load(path.read_text())
    vllm = yaml.safe_load((root / "configs/gpu/qlora_qwen2.5-1.5b_gsm8k.yaml").read_text())
    assert vllm["use_vllm"] is True and plain["use_vllm"] is False
    same = {k: v for k, v in vllm.items() if not k.startswith("vllm_") and k not in ("use_vllm", "output_dir")}
    assert {k: v for k, v in plain.items() if k not in ("use_vllm", "output_dir")} == same
    assert plain["output_dir"] != vllm["output_dir"]  # two runs never write into one folder

    # --use_cpu only because transformers refuses bf16 without a GPU at parse time
    task_args, training_args, model_args = parse_train_args(["--config", str(path), "--use_cpu", "true"])
    assert task_args.task == "gsm8k" and task_args.task_kwargs == {"conversational": True}
    assert training_args.use_vllm is False and training_args.bf16 and training_args.activation_checkpointing
    assert training_args.per_device_train_batch_size * training_args.gradient_accumulation_steps == 128
    _, quant, peft = policy_init(model_args, training_args)
    assert quant.bnb_4bit_quant_type == "nf4" and quant.bnb_4bit_compute_dtype == torch.bfloat16
    assert peft.target_modules == ALL_LINEAR and peft.r == 32
    assert training_args.use_vllm is False  # policy_init never turns it on


# ---- named steps and variants, budgets (issue 49.4) ----------------------------------------------------------------


def test_gpu_check_only_adds_what_the_named_steps_need(tmp_path):
    steps = gpu_check.plan(tmp_path, cpu=False)
    names, notes = gpu_check.select("ext_sampler, harness", steps)
    assert names == ["packages", "prepare", "main_job", "harness", "ext_sampler"]  # plan order, needs added
    assert any("main_job" in n for n in notes) and any("prepare" in n for n in notes)
    assert gpu_check.select("main_job", steps)[0] == ["packages", "main_job"]  # the embedded model: nothing prepared
    assert gpu_check.select(None, steps)[0] == gpu_check.step_names(steps)
    assert set(gpu_check.H100_SECONDS) == set(gpu_check.DESCRIPTIONS) == set(gpu_check.step_names(steps))


def test_gpu_check_refuses_an_unknown_step_naming_the_steps(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--only", "ext_sampler,ext_adaptive", "--workdir", str(tmp_path / "w")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--only: unknown step(s) ['ext_adaptive']" in err
    assert "the steps are: packages, prepare, main_job, harness, ext_process" in err and "gpu_config" in err
    assert not (tmp_path / "w").exists()


def test_gpu_check_lists_its_steps_with_their_h100_times(capsys):
    assert gpu_check.main(["--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    listed = {line.split()[0]: int(line.split()[1]) for line in lines[1:-1]}
    assert listed == gpu_check.H100_SECONDS
    assert lines[-1].split()[:2] == ["all", str(sum(gpu_check.H100_SECONDS.values()))]


def test_gpu_check_without_cuda_skips_only_the_named_steps(no_cuda, tmp_path, capsys):
    assert gpu_check.main(["--only", "ext_skip", "--workdir", str(tmp_path / "w")]) == 0
    skipped = [line for line in capsys.readouterr().out.splitlines() if line.startswith("skipped")]
    assert skipped == [f"skipped (no CUDA)  {n}" for n in ("packages", "prepare", "ext_skip")]


def test_gpu_check_budget_skips_what_would_end_past_it_and_records_every_step(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(gpu_check.H100_SECONDS, "gpu_config", 10**6)  # never fits
    record = tmp_path / "check.json"
    argv = ["--dry-run", "--only", "ext_skip,gpu_config", "--budget", "3600", "--json", str(record)]
    assert gpu_check.main([*argv, "--workdir", str(tmp_path / "w"), "--keep-models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("SKIP  gpu_config") and "over --budget" in line for line in lines)
    assert lines[-1].startswith("3/3 passed") and lines[-1].endswith("skipped: gpu_config")
    data = json.loads(record.read_text())
    assert data["finished"] and data["mode"] == "dry run" and data["budget_s"] == 3600
    assert {n: e["status"] for n, e in data["steps"].items()} == {
        "packages": "pass", "prepare": "pass", "ext_skip": "pass", "gpu_config": "skipped"
    }  # fmt: skip
    assert data["passed"] == ["packages", "prepare", "ext_skip"] and data["skipped"] == ["gpu_config"]

    # a second run reuses what the first prepared (kept): prepare costs nothing, the steps' commands still resolve
    assert (
        gpu_check.main(["--dry-run", "--only", "ext_refill", "--workdir", str(tmp_path / "w"), "--reuse-prepared"]) == 0
    )
    assert "(reused: " in capsys.readouterr().out


def test_gpu_check_runs_steps_in_the_repository_with_portable_paths(tmp_path, monkeypatch):
    inside = gpu_check.ROOT / "outputs" / "gpu_check_path_test"
    monkeypatch.chdir(gpu_check.ROOT)
    assert gpu_check.as_argument(inside) == Path("outputs/gpu_check_path_test")
    assert gpu_check.as_argument(tmp_path) == tmp_path.resolve()  # outside the repository: as it is
    monkeypatch.chdir(tmp_path)
    assert gpu_check.as_argument(inside) == inside  # run from elsewhere: absolute, so dry runs resolve it


def test_gpu_step_variants_are_named_and_checked(no_cuda, capsys):
    assert gpu_step.parse_variants(" sampler,off ") == ("off", "sampler")  # the order of VARIANTS
    for bad in ("off,generate", ""):
        with pytest.raises(SystemExit, match="the variants are off, on, static, sampler"):
            gpu_step.parse_variants(bad)
    with pytest.raises(SystemExit, match=r"unknown \['eager'\]"):  # before anything is built or checked
        gpu_step.main(["--variants", "static,eager"])


def test_gpu_step_rehearsal_of_named_variants_writes_only_where_told(tmp_path, results_dir):
    argv = ["--device", "cpu", "--shapes", "tiny", "--kinds", "lora", "--variants", "sampler,static", "--reps", "1",
            "--batch", "8", "--group", "4", "--completion", "6"]  # fmt: skip
    payload = gpu_step.main([*argv, "--results-dir", str(tmp_path / "part")])["tiny"]
    assert list(results_dir.iterdir()) == []  # never into benchmarks/results from a CPU
    record = json.loads((tmp_path / "part" / "gpu_step_tiny.json").read_text())
    lora = record["kinds"]["lora"]
    assert lora["errors"] == {} and set(lora["variants"]) == {"static", "sampler"}
    assert "time_over_off" not in lora and set(lora["time_over_static"]) == {"sampler"}
    assert set(record["sampler_vs"]) == {"lora"} and record["sampler_vs"]["lora"]["static"]["peak_over"] is None
    assert record["sampler_target"] is None and payload["sampler_vs"] == record["sampler_vs"]
    assert "| time / static |" in record["table"] and "lora, sampler vs static:" in record["table"]
    assert record["params"]["variants"] == "sampler,static" and record["params"]["results_dir"] == str(
        tmp_path / "part"
    )


# ---- committed GPU results name no folder of the machine that ran them --------------------------------------------


def test_portable_text_rewrites_machine_paths():
    log = (
        "$ python scripts/train.py --model_name_or_path /tmp/gpu_check/policy --output_dir /tmp/gpu_check/ext_skip\n"
        "../../../opt/torch/.venv/lib/python3.12/site-packages/torch/jit/_script.py:365: 14 warnings\n"
        '  File "/usr/lib/python3.12/pathlib.py", line 1029\r  $ -m benchmarks.gpu_step --worker build 1.5b '
        "/tmp/grpo_ext_gpu_step_model_uhx9u6zq/qwen2.5-1.5b-random cuda\n"
        "[gw6] linux -- Python 3.12.3 /opt/torch/.venv/bin/python3; wrote /repo/x/benchmarks/results/a.json; "
        "see https://docs.pytest.org/en/stable/how-to\n"
    )
    assert len(_gpu.absolute_paths(log)) == 6
    text = _gpu.portable_text(log, root="/repo/x")
    assert text == (
        "$ python scripts/train.py --model_name_or_path gpu_check/policy --output_dir gpu_check/ext_skip\n"
        "site-packages/torch/jit/_script.py:365: 14 warnings\n"
        '  File "python3.12/pathlib.py", line 1029\r  $ -m benchmarks.gpu_step --worker build 1.5b '
        "model/qwen2.5-1.5b-random cuda\n"
        "[gw6] linux -- Python 3.12.3 python3; wrote benchmarks/results/a.json; "
        "see https://docs.pytest.org/en/stable/how-to\n"
    )
    assert _gpu.absolute_paths(text) == []


def test_committed_gpu_results_hold_no_machine_paths(root):
    folders = sorted((root / "benchmarks" / "results").glob("gpu_*"))
    assert {f.name for f in folders} >= {"gpu_2026-11-24", "gpu_2026-11-28"}
    found = {}
    for path in (p for folder in folders for p in folder.rglob("*") if p.is_file()):
        paths = _gpu.absolute_paths(path.read_text(errors="replace"))
        if paths:
            found[str(path.relative_to(root))] = paths[:3]
    assert found == {}, "rewrite them with benchmarks._gpu.portable_text"


def test_committed_gpu_step_of_2026_11_28_says_what_its_readme_says(root):
    folder = root / "benchmarks" / "results" / "gpu_2026-11-28"
    record = json.loads((folder / "gpu_step_0.5b.json").read_text())
    qlora = record["kinds"]["qlora"]["variants"]
    seconds = {v: round(qlora[v]["seconds"]["median"], 2) for v in qlora}
    assert seconds == {"off": 13.08, "on": 11.42, "static": 10.54, "sampler": 2.91}
    assert round(record["sampler_target"]["speedup"], 2) == 4.49 and record["sampler_target"]["met"]
    assert abs(qlora["sampler"]["peak_bytes"] / qlora["off"]["peak_bytes"] - 1) < 0.01
    readme = (folder / "README.md").read_text()
    for quoted in ("2.91", "13.1", "10.5", "4.49x", "22 passed", "bd5aac5", "transformers 5.24.0", "trl 1.16.0"):
        assert quoted in readme
    assert "22 passed" in (folder / "pytest_cuda.log").read_text()
