"""Fixtures of the benchmark tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="session")
def tiny_chat_llama_folder(tmp_path_factory, tiny_chat_tokenizer) -> Path:
    """A random 2-layer Llama (grouped-query attention) with the SmolLM2-shaped chat tokenizer, saved as a model folder
    a benchmark loads by path (seeded; read-only for the tests that share it)."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    from tests.conftest import tiny_llama_config

    tokenizer = AutoTokenizer.from_pretrained(tiny_chat_tokenizer)
    torch.manual_seed(0)
    config = tiny_llama_config(tokenizer, 2048)
    folder = tmp_path_factory.mktemp("tiny_chat_llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
