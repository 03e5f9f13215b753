"""The transformers backend loads an adapter folder onto its base (grpo_ext.evaluation.backends): a LoRA adapter as
one model, a QLoRA adapter on the 4-bit base it was trained on."""

import json

import pytest

from grpo_ext.errors import UserError
from grpo_ext.tasks import get_task


def test_adapter_folder_is_loaded_onto_its_base_as_one_model(tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grpo_ext.evaluation.backends import load_backend
    from grpo_ext.model_paths import resolve_model_path
    from grpo_ext.sampler.sampling import SamplingParams, sample

    base_path = resolve_model_path("embedded")
    torch.manual_seed(0)
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base_path),
        LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    ).eval()
    peft_model.save_pretrained(tmp_path / "adapter")
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]

    backend = load_backend(str(tmp_path / "adapter"), "transformers")
    assert backend.fingerprint and not hasattr(backend.model, "peft_config")  # merged: one plain model
    prompts = get_task("arithmetic").load("test", 6)["prompt"]
    greedy = SamplingParams(n=1, temperature=0, max_new_tokens=20)
    # the PEFT model in memory (the trainer's case) samples through continuous batching as it is
    assert backend.generate(prompts, greedy) == sample(
        peft_model, tokenizer, prompts, greedy, progress=False, continuous=True
    )
    with pytest.raises(FileNotFoundError, match="base model is missing"):
        (tmp_path / "broken").mkdir()
        (tmp_path / "broken" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "/no/base"}))
        load_backend(str(tmp_path / "broken"), "transformers")


def test_a_qlora_adapter_is_scored_on_the_base_it_was_trained_on(tmp_path):
    """An adapter whose run record says the base was loaded in 4 bit (QLoRA) is loaded onto the base quantised the
    same way, unmerged; `full_precision` (and an adapter without such a record) merges it into the fp32 base. Both
    against references built here with transformers' and PEFT's own calls."""
    import torch
    import yaml
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    from grpo_ext.evaluation.backends import load_backend, load_model_and_tokenizer
    from grpo_ext.model_paths import resolve_model_path

    base_path = resolve_model_path("embedded")
    torch.manual_seed(0)
    lora = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(AutoModelForCausalLM.from_pretrained(base_path), lora).save_pretrained(tmp_path / "qlora")
    record = {"model": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "use_bnb_nested_quant": True}}
    (tmp_path / "qlora" / "grpo_ext_config.yaml").write_text(yaml.safe_dump(record))
    ids = torch.tensor([[5, 9, 14, 3, 7, 11]])

    def logits(model):
        with torch.no_grad():
            return model(input_ids=ids).logits

    quantized, _ = load_model_and_tokenizer(str(tmp_path / "qlora"), device="cpu")
    nf4 = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.float32,
    )
    reference = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(base_path, quantization_config=nf4, dtype=torch.float32),
        tmp_path / "qlora",
    ).eval()
    for layer in reference.modules():  # as in training (grpo_ext.policy_loading.prepare_quantized_policy)
        if hasattr(layer, "support_avx512bf16_for_cpu"):
            layer.support_avx512bf16_for_cpu = False
    assert isinstance(quantized, PeftModel) and getattr(quantized, "is_loaded_in_4bit", False)
    torch.testing.assert_close(logits(quantized), logits(reference))

    full, _ = load_model_and_tokenizer(str(tmp_path / "qlora"), device="cpu", adapter_base="full_precision")
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), tmp_path / "qlora")
    assert not isinstance(full, PeftModel) and not getattr(full, "is_loaded_in_4bit", False)
    torch.testing.assert_close(logits(full), logits(merged.merge_and_unload().eval()))
    assert (logits(full) - logits(quantized)).abs().max() > 1e-3  # the two loads are different models

    # the sample cache tells the two loads apart; an adapter trained on a full-precision base has one load
    as_trained = load_backend(str(tmp_path / "qlora"), "transformers")
    unquantized = load_backend(str(tmp_path / "qlora"), "transformers", adapter_base="full_precision")
    assert as_trained.fingerprint != unquantized.fingerprint
    record["model"]["load_in_4bit"] = False
    (tmp_path / "qlora" / "grpo_ext_config.yaml").write_text(yaml.safe_dump(record))
    plain = load_backend(str(tmp_path / "qlora"), "transformers")
    assert plain.fingerprint == unquantized.fingerprint and not isinstance(plain.model, PeftModel)
    with pytest.raises(UserError, match="adapter_base: expected one of as_trained, full_precision"):
        load_model_and_tokenizer(str(tmp_path / "qlora"), adapter_base="fp32")
