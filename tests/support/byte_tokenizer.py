"""The scripted backend's own tokenizer as a Hugging Face directory: token id `b` is byte `b`
(what `scripted_backend` samples and renders prompts as), 256 its end of turn. With it the
console decodes a scripted session's tokens as it decodes a real model's."""

from __future__ import annotations

from pathlib import Path

from tests.support.scripted_backend import END_OF_TURN

END_TEXT = "<|end_of_turn|>"


def write_byte_tokenizer(folder: Path) -> Path:
    """A byte-level fast tokenizer in `folder` (made if missing); `folder`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    as_text = bytes_to_unicode()  # byte -> the printable character byte-level BPE writes it as
    vocab = {as_text[b]: b for b in range(256)} | {END_TEXT: END_OF_TURN}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=END_TEXT))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=END_TEXT)
    fast.save_pretrained(str(folder))
    return folder
