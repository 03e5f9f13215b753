import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]


# Modules whose tests read one module-scoped run of a minute or more: under pytest-xdist one worker runs all of a
# module's tests (the run made once, not once a worker); every other test goes to whichever worker is free.
SHARED_RUN_MODULES = {
    "tests/evaluation/test_harness_cli.py",  # small_run: the harness script run as a user runs it
    "tests/experiments/iterative/test_iterative_quick.py",  # killed_and_resumed: the quick variant killed, resumed
    "tests/experiments/iterative/test_loop.py",  # interrupted_run: the loop interrupted and resumed
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`make test`'s `--dist loadgroup`: a test a unit of work, a module of :data:`SHARED_RUN_MODULES` one unit.
    Not xdist's `xdist_group` marks: they append `@name` to the test ids, which pytest >= 9.2 no longer lets them do
    (the marked tests were split over the workers, silently), and ids such as `[pass@1 raised]` hold an `@` too."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module in SHARED_RUN_MODULES else nodeid

    return SharedRunScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs `-n 2`): the end-to-end runs (`slow`, minutes each) are handed out first,
    so that the short tests fill the workers' last minutes instead of one worker running a long test alone at the end.
    Each worker sorts its own collection the same way (xdist checks that they agree); without xdist the order is the
    files' own."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: the order within each part kept


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def python() -> str:
    return sys.executable


def tiny_llama_config(tokenizer, max_position_embeddings: int, **overrides):
    """The config of the tests' random 2-layer Llama (hidden 32, grouped-query attention: 4 heads on 2) for
    ``tokenizer`` (its vocabulary, pad and EOS tokens)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **overrides,
    )


def _tiny_char_llama(tie_word_embeddings: bool = False):
    """A random 2-layer Llama (grouped-query attention) on the project's character tokenizer, seeded: its samples
    rarely coincide and rarely stop early. ``(model in eval mode, tokenizer)``."""
    from transformers import LlamaForCausalLM

    from grpo_ext.char_tokenizer import build_char_tokenizer

    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    config = tiny_llama_config(tokenizer, 128, tie_word_embeddings=tie_word_embeddings)
    return LlamaForCausalLM(config).eval(), tokenizer


@pytest.fixture(scope="session")
def tiny_char_llama():
    """The factory :func:`_tiny_char_llama` (a fresh model per call)."""
    return _tiny_char_llama


@pytest.fixture(scope="session")
def tiny_chat_tokenizer(tmp_path_factory) -> Path:
    """A folder holding a byte-level BPE tokenizer in SmolLM2's layout (its pre-tokenizer and decoder, the special
    tokens ``<|endoftext|>`` / ``<|im_start|>`` / ``<|im_end|>`` as unk / bos / eos and pad, a ChatML chat template),
    with no merges: every byte one token. What the real study's rehearsal needs of the real model's tokenizer, without
    ``make real-model``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tests.gguf_fixture import CHAT_TEMPLATE, SPECIALS, _byte_chars

    vocab = {token: i for i, token in enumerate([*SPECIALS, *_byte_chars()])}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    backend.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    backend.add_special_tokens(list(SPECIALS))
    unk, bos, eos = SPECIALS
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token=unk, bos_token=bos, eos_token=eos, pad_token=eos
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    folder = tmp_path_factory.mktemp("tiny_chat_tokenizer")
    tokenizer.save_pretrained(folder)
    return folder
