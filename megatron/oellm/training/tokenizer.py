"""A byte-level tokenizer that needs no file and no download: ids 0-255 are the UTF-8 bytes, 256 ends a document.

Real-text corpora built by ``tools/build_corpus.py`` use it. Training on such a corpus needs only the vocabulary
size and the end-of-document id, which megatron's ``NullTokenizer`` provides from flags: with
``--tokenizer-type NullTokenizer --vocab-size 257`` its end-of-document id is ``vocab_size - 1 = 256``, the same as
here (:data:`BYTE_TOKENIZER_FLAGS`).
"""

from __future__ import annotations

from collections.abc import Sequence

NUM_BYTES = 256
"""Ids ``0 .. 255`` are the bytes of the UTF-8 text."""


class ByteTokenizer:
    """UTF-8 bytes as token ids, plus one end-of-document token (id 256)."""

    eod: int = NUM_BYTES
    """End-of-document id, appended after every document of a corpus."""
    vocab_size: int = NUM_BYTES + 1
    """Bytes plus the end-of-document token (megatron pads the embedding further)."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (its UTF-8 bytes), without the end-of-document token."""
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``; end-of-document tokens become newlines, invalid UTF-8 is replaced (U+FFFD)."""
        chunks, current = [], bytearray()
        for token in ids:
            if token == self.eod:
                chunks.append(current.decode("utf-8", errors="replace"))
                current = bytearray()
            elif 0 <= token < NUM_BYTES:
                current.append(token)
            else:
                raise ValueError(f"token id {token} is outside the byte tokenizer's vocabulary (0..{self.eod})")
        chunks.append(current.decode("utf-8", errors="replace"))
        return "\n".join(chunks)


BYTE_TOKENIZER_FLAGS: list[str] = ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(ByteTokenizer.vocab_size)]
"""Megatron flags that train on a byte-tokenized corpus (NullTokenizer: end-of-document id = vocab size - 1)."""
