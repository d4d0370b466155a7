"""The byte tokenizer: round trip on random text, end-of-document handling, agreement with NullTokenizer."""

import random

import pytest

from megatron.oellm.training.tokenizer import BYTE_TOKENIZER_FLAGS, ByteTokenizer


def random_text(rng: random.Random, length: int) -> str:
    alphabet = "abcxyz ÄöüßéΩ中文😀\n\t{}()" + "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(20))
    return "".join(rng.choice(alphabet) for _ in range(length))


def test_round_trip_of_random_unicode_text():
    rng = random.Random(random.random())
    tokenizer = ByteTokenizer()
    for _ in range(20):
        text = random_text(rng, rng.randrange(0, 200))
        ids = tokenizer.encode(text)
        assert ids == list(text.encode("utf-8"))
        assert all(0 <= i < 256 for i in ids)
        assert tokenizer.decode(ids) == text


def test_end_of_document_separates_documents():
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode("first") + [tokenizer.eod] + tokenizer.encode("second")
    assert tokenizer.decode(ids) == "first\nsecond"


def test_out_of_vocabulary_id_is_an_error():
    with pytest.raises(ValueError, match="outside"):
        ByteTokenizer().decode([300])


def test_megatron_null_tokenizer_flags_give_the_same_eod_and_vocabulary():
    from megatron.core.tokenizers.text.libraries.null_tokenizer import NullTokenizer

    vocab_size = int(BYTE_TOKENIZER_FLAGS[BYTE_TOKENIZER_FLAGS.index("--vocab-size") + 1])
    null = NullTokenizer(vocab_size)
    assert null.eod == ByteTokenizer.eod and null.vocab_size == ByteTokenizer.vocab_size


def test_every_byte_id_decodes_as_utf8_decodes_that_byte():
    """Ids 0-255 are bytes, NUL (0) included: ``decode`` agrees with Python's UTF-8 decoder on random byte strings
    (invalid sequences replaced)."""
    rng = random.Random(random.random())
    tokenizer = ByteTokenizer()
    for _ in range(20):
        data = bytes([0, *(rng.randrange(256) for _ in range(rng.randrange(1, 64)))])
        ids = rng.sample(list(data), len(data))
        assert tokenizer.decode(ids) == bytes(ids).decode("utf-8", errors="replace")
