"""QLoRA: 4-bit nf4 policy + LoRA through TRL's ModelConfig, with every extension (embedded model).

Written for the CPU and run on CUDA machines too: there bitsandbytes places a 4-bit model on the GPU (its quantiser
picks `cuda:0` when no device map is given), so every tensor a test feeds or compares goes where the model is."""

import gc
import logging
import shutil
from pathlib import Path

import bitsandbytes as bnb
import pytest
import torch
from huggingface_hub import ModelCard
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, Qwen2Config
from trl import ModelConfig

from grpo_ext.hub import trainer_model_card
from grpo_ext.memory_footprint import full_precision_footprint, log_memory_footprint
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.policy_loading import ALL_LINEAR, policy_init, prepare_quantized_policy
from tests.trainer_utils import tiny_args, tiny_trainer

MODEL = str(EMBEDDED_MODEL_DIR)
PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def qlora_model_args(**overrides):
    kwargs = dict(
        model_name_or_path=MODEL,
        dtype="float32",
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        use_bnb_nested_quant=True,
        use_peft=True,
        lora_r=16,
        lora_alpha=32,
        lora_dropout=0.0,
    )
    kwargs.update(overrides)
    return ModelConfig(**kwargs)


def parity_reward(completions, **kwargs):
    """Rewards that differ within every group (with hot sampling, so the completions differ): a gradient every step."""
    return [float(i % 2) for i in range(len(completions))]


def qlora_trainer(tmp_path, **arg_overrides):
    args = tiny_args(tmp_path=tmp_path, temperature=3.0, **arg_overrides)
    _, quantization_config, peft_config = policy_init(qlora_model_args(), args)
    trainer = tiny_trainer(
        args=args, reward_funcs=[parity_reward], quantization_config=quantization_config, peft_config=peft_config
    )
    prepare_quantized_policy(trainer.model)  # what GRPOExtTrainer does after TRL built the policy
    return trainer


def device_of(model) -> torch.device:
    return next(model.parameters()).device


def logprobs(model, ids):
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=ids.to(device_of(model))).logits.float(), dim=-1)


def test_policy_init_maps_trl_model_config_to_qlora():
    args = tiny_args()
    model_id, quant, peft = policy_init(qlora_model_args(), args)
    assert model_id == MODEL
    assert quant.load_in_4bit and quant.bnb_4bit_quant_type == "nf4" and quant.bnb_4bit_use_double_quant
    assert quant.bnb_4bit_compute_dtype == torch.float32  # CPU: as fast as bf16 here, and exact
    assert isinstance(peft, LoraConfig) and peft.r == 16 and peft.target_modules == ALL_LINEAR
    assert args.model_init_kwargs["dtype"] == "float32"

    model_args = qlora_model_args(dtype="bfloat16", lora_target_modules=["q_proj", "v_proj"])
    _, quant, peft = policy_init(model_args, tiny_args())
    assert quant.bnb_4bit_compute_dtype == torch.bfloat16  # an explicit half dtype is the compute dtype
    assert set(peft.target_modules) == {"q_proj", "v_proj"}  # configurable

    _, quant, peft = policy_init(ModelConfig(model_name_or_path=MODEL), tiny_args())
    assert quant is None and peft is None  # full precision

    with pytest.raises(ValueError, match="load_in_4bit: quantised weights cannot be trained directly"):
        policy_init(qlora_model_args(use_peft=False), tiny_args())


@pytest.mark.parametrize("config_cls, extra", [(LlamaConfig, {"tie_word_embeddings": False}), (Qwen2Config, {})])
def test_all_linear_targets_every_projection_and_not_lm_head(config_cls, extra):
    config = config_cls(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=50,
        **extra,
    )
    model = get_peft_model(AutoModelForCausalLM.from_config(config), LoraConfig(r=4, target_modules=ALL_LINEAR))
    targeted = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert targeted == PROJECTIONS


def test_qlora_grpo_step_trains_only_lora_with_adaptive_beta_and_no_second_model(tmp_path):
    trainer = qlora_trainer(tmp_path, max_steps=2, beta=0.04, kl_controller="adaptive", target_kl=0.01, kl_horizon=64)
    model = trainer.model
    # 4-bit base: every attention/MLP projection is a bitsandbytes Linear4bit under its LoRA wrapper
    base_layers = {n: m for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in PROJECTIONS}
    assert base_layers and all(isinstance(m.base_layer, bnb.nn.Linear4bit) for m in base_layers.values())
    assert not any(isinstance(m, bnb.nn.Linear4bit) for n, m in model.named_modules() if "lm_head" in n)
    # β > 0 without a second model: the reference is the same weights with the adapter disabled
    assert isinstance(model, PeftModel) and trainer.ref_model is None
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)

    ids = torch.tensor([trainer.processing_class("12+34-5=46-5=41;#41")["input_ids"]])
    before = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    assert torch.equal(logprobs(model, ids), _ref_logprobs(model, ids))  # LoRA B starts at zero
    trainer.train()

    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k].cpu())}
    assert changed and all("lora_" in k for k in changed)  # 4-bit weights, quant state, norms, embeddings untouched
    assert any("lora_A" in k for k in changed) and any("lora_B" in k for k in changed)
    assert not torch.allclose(logprobs(model, ids), _ref_logprobs(model, ids))  # policy moved, reference did not
    logs = [entry for entry in trainer.state.log_history if "kl" in entry]
    assert len(logs) == 2 and all(torch.isfinite(torch.tensor(e["loss"])) for e in logs)
    assert trainer.beta != 0.04 and logs[-1]["beta"] == pytest.approx(trainer.beta)  # the adaptive β moved

    # what GRPOExtTrainer.create_model_card writes to README.md (checkpoint saves, push_to_hub)
    card = ModelCard(str(trainer_model_card(trainer, dataset_name="arithmetic", tags=["my-tag"])))
    assert card.data.library_name == "peft"
    assert {"trl", "grpo", "qlora", "adaptive-kl", "my-tag"} <= set(card.data.tags)
    assert "training steps: 2" in card.text and "adaptive KL coefficient" in card.text


def _ref_logprobs(model, ids):
    with model.disable_adapter():
        return logprobs(model, ids)


def test_qlora_with_gradient_checkpointing(tmp_path):
    trainer = qlora_trainer(tmp_path / "gc", max_steps=1, beta=0.04, activation_checkpointing=True)
    model = trainer.model
    lora = {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer.train()
    assert model.base_model.model.is_activation_checkpointing
    moved = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p.detach().cpu(), lora[n])]
    layers = {n.split(".layers.")[1].split(".")[0] for n in moved if ".layers." in n}
    # gradients reached every layer through the checkpointed 4-bit blocks
    assert layers == {str(i) for i in range(model.config.num_hidden_layers)} and len(layers) >= 2


def test_prepare_quantized_policy_keeps_gradients_right_after_an_eval_pass():
    """bitsandbytes repacks 4-bit weights for inference on CPUs with AVX512-BF16 and then drops their input gradient."""

    def build(prepare):
        quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
        base = AutoModelForCausalLM.from_pretrained(MODEL, quantization_config=quant, dtype=torch.float32)
        torch.manual_seed(0)
        model = get_peft_model(base, LoraConfig(r=4, target_modules=ALL_LINEAR, init_lora_weights=False))
        for param in model.parameters():  # as TRL leaves them for a quantised model
            if param.requires_grad:
                param.data = param.data.to(torch.bfloat16)
        if prepare:
            changed = prepare_quantized_policy(model)
            assert changed["adapters_to_fp32"] == sum(p.requires_grad for p in model.parameters())
        return model

    ids = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]])

    def first_layer_grad(model):
        model.train()
        model.zero_grad()
        model(input_ids=ids.to(device_of(model))).logits.float().pow(2).mean().backward()
        return model.base_model.model.model.layers[0].self_attn.q_proj.lora_A.default.weight.grad.cpu().clone()

    expected = first_layer_grad(build(prepare=True))
    model = build(prepare=True)
    model.eval()
    with torch.no_grad():
        model(input_ids=ids.to(device_of(model)))  # an evaluation / sampling callback between training steps
    assert torch.allclose(first_layer_grad(model), expected, rtol=1e-4, atol=1e-6)


def _is_mapped(path) -> bool:
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the process's memory mappings (Linux)")
@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="a CPU subject: with CUDA, bitsandbytes moves the 4-bit model to the GPU and transformers does not keep the "
    "checkpoint memory-mapped, so there is no mapping to release (the test's precondition fails by design)",
)
def test_prepare_quantized_policy_releases_the_checkpoint_mapping(tmp_path):
    """Unquantised tensors left as views of the memory-mapped checkpoint keep all of its pages resident."""
    folder = tmp_path / "model"
    shutil.copytree(MODEL, folder)  # a path of its own: no other test's model maps it
    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(folder, quantization_config=quant, dtype=torch.float32)  # as stored
    model = get_peft_model(base, LoraConfig(r=4, target_modules=ALL_LINEAR))
    checkpoint = folder / "model.safetensors"
    assert _is_mapped(checkpoint)  # transformers maps the checkpoint; if a version stops, this test has no subject
    ids = torch.tensor([[3, 4, 5, 6, 7, 8, 9, 10]])
    # train mode (LoRA dropout 0: the same values): an eval pass would have bitsandbytes repack the 4-bit weights for
    # its AVX512-BF16 kernel, which needs in_features >= its block size 64 (the embedded model's layers are 32 wide)
    model.train()
    before = logprobs(model, ids)

    changed = prepare_quantized_policy(model)
    gc.collect()
    assert changed["bytes_released_from_checkpoint_mapping"] > 0
    assert not _is_mapped(checkpoint)
    assert torch.equal(logprobs(model, ids), before)  # the same values, in the model's own memory


def test_memory_footprint_is_logged_against_a_computed_full_precision_load(caplog):
    full = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    estimate = full_precision_footprint(full.config)
    assert estimate["float32"] == full.get_memory_footprint()  # computed on the meta device, equal to a real load
    assert estimate["bfloat16"] < estimate["float32"]

    quant = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)
    model = AutoModelForCausalLM.from_pretrained(MODEL, quantization_config=quant, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=16, target_modules=ALL_LINEAR))
    with caplog.at_level(logging.INFO):
        info = log_memory_footprint(model, MODEL)
    assert info["loaded_as"] == "4-bit nf4 + double quant"
    assert info["full_precision"] == estimate
    adapter_bytes = 4 * info["trainable_parameters"]  # fp32 LoRA: r 16 on 32-wide layers outweighs the 4-bit base
    assert 0 < info["quant_state_bytes"] < info["loaded_bytes"] - adapter_bytes < estimate["float32"] / 2
    assert info["trainable_parameters"] == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert "policy memory footprint" in caplog.text and "fp32" in caplog.text


def test_gpu_config_parses_and_resolves_without_downloading(root):
    """configs/gpu/qlora_qwen2.5-1.5b_gsm8k.yaml is untested on a GPU here; its fields must parse and resolve."""
    import importlib.util

    from grpo_ext.script_args import parse_train_args
    from grpo_ext.tasks import get_task

    # --use_cpu only because transformers refuses bf16 without a GPU at parse time; everything else is the file's
    task_args, training_args, model_args = parse_train_args(
        ["--config", str(root / "configs/gpu/qlora_qwen2.5-1.5b_gsm8k.yaml"), "--use_cpu", "true"]
    )
    assert task_args.task == "gsm8k" and get_task(task_args.task, **task_args.task_kwargs).name == "gsm8k"
    assert model_args.model_name_or_path == "Qwen/Qwen2.5-1.5B-Instruct" and model_args.dtype == "bfloat16"
    assert model_args.load_in_4bit and model_args.use_bnb_nested_quant and model_args.use_peft
    assert training_args.bf16 and training_args.beta > 0 and training_args.activation_checkpointing
    assert training_args.use_vllm and training_args.vllm_mode == "colocate"
    assert training_args.zero_std_groups == "skip"

    model_id, quant, peft = policy_init(model_args, training_args)
    assert model_id == "Qwen/Qwen2.5-1.5B-Instruct"  # a hub id stays a hub id (nothing is fetched here)
    assert quant.bnb_4bit_compute_dtype == torch.bfloat16 and quant.bnb_4bit_quant_type == "nf4"
    assert peft.target_modules == ALL_LINEAR and peft.r == 32
    assert training_args.use_vllm == (importlib.util.find_spec("vllm") is not None)  # colocate only with vllm
