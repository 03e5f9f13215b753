from transformers import AutoTokenizer

from grpo_ext.char_tokenizer import CHARACTERS, build_char_tokenizer


def test_round_trip_and_one_token_per_character(tmp_path):
    build_char_tokenizer().save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    text = "37+45=82;82-18=64;#64"
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert len(enc.input_ids) == len(text)
    assert enc.offset_mapping == [(i, i + 1) for i in range(len(text))]
    assert tok.decode(enc.input_ids) == text
    assert tok.decode(enc.input_ids + [tok.eos_token_id], skip_special_tokens=True) == text
    assert len(set(tok(CHARACTERS, add_special_tokens=False).input_ids)) == len(CHARACTERS)


def test_special_tokens_and_unknown_characters():
    tok = build_char_tokenizer()
    assert tok.pad_token == "<pad>" and tok.eos_token == "<eos>"
    assert tok.pad_token_id != tok.eos_token_id
    assert tok("1a", add_special_tokens=False).input_ids[1] == tok.unk_token_id
    assert tok("12").input_ids == tok("12", add_special_tokens=False).input_ids  # no BOS added
