"""Regenerate tinyhub/tokenizer.json, the tokenizer every tiny checkpoint ships.

A byte-level BPE trained on tinyhub/corpus.txt. The result is committed, so tiny
checkpoints do not depend on the trainer being deterministic across versions of
the tokenizers library; this script only documents how the file was made.

    python -m tinyhub.make_tokenizer
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>"]
VOCAB_SIZE = 512


def main() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train([str(HERE / "corpus.txt")], trainer)
    tok.save(str(HERE / "tokenizer.json"), pretty=False)
    print(f"wrote {HERE / 'tokenizer.json'} with {tok.get_vocab_size()} tokens")


if __name__ == "__main__":
    main()
