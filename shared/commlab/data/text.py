"""Word-level text for the language model: WikiText-2 (`wikitext2`) and any text file (`text:<path>`).

Tokens as in pytorch/examples' word_language_model (PowerSGD's LSTM experiment builds on it): each
line split on whitespace, then `<eos>`; the vocabulary in order of first appearance. The token
stream is cut into sequences of SEQ_LEN (PowerSGD's BPTT length); a sample's targets are the same
positions shifted by one token. Sequences are independent samples (each starts from a zero state).

wikitext2: `<data dir>/wikitext-2/wiki.{train,valid,test}.tokens` (wikitext-2-v1.zip, Merity et
al. 2016), checked against the official counts (2,088,628 training and 245,569 test tokens, a
vocabulary of 33,278); the test split is wiki.test.tokens (valid only adds its words to the
vocabulary). text:<path>: one file, vocabulary from it, the last tenth of its tokens for testing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .dataset import DatasetError, DatasetSpec, RawData, register_dataset, register_family

SEQ_LEN = 30
WIKITEXT_DIR = "wikitext-2"
WIKITEXT_VOCAB, WIKITEXT_TRAIN_TOKENS, WIKITEXT_TEST_TOKENS = 33_278, 2_088_628, 245_569
TEXT_TEST_SHARE = 0.1


def tokenize(path: Path, vocab: dict[str, int]) -> np.ndarray:
    """Token ids of a file, adding unseen words to `vocab`."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"text file {path} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"{path}: not readable as UTF-8 text ({e})") from None
    lines = text.split("\n")  # lines as a file iterates them (not str.splitlines' other separators)
    ids = []
    for line in lines[:-1] if text.endswith("\n") else lines:
        for word in line.split() + ["<eos>"]:
            ids.append(vocab.setdefault(word, len(vocab)))
    return np.asarray(ids, dtype=np.int32)


def sequences(tokens: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets), both (n, SEQ_LEN): consecutive windows, targets one token ahead."""
    n = (len(tokens) - 1) // SEQ_LEN
    if n < 1:
        raise DatasetError(f"{where}: {len(tokens)} tokens, fewer than one sequence of {SEQ_LEN} + 1")
    return tokens[: n * SEQ_LEN].reshape(n, SEQ_LEN), tokens[1: n * SEQ_LEN + 1].reshape(n, SEQ_LEN)


def read_wikitext2(root: Path) -> RawData:
    folder = root / WIKITEXT_DIR
    paths = [folder / f"wiki.{split}.tokens" for split in ("train", "valid", "test")]
    for path in paths:
        if not path.is_file():
            raise DatasetError(f"wikitext2: {path} not found: unzip wikitext-2-v1.zip (WikiText-2, word level, "
                               f"Merity et al.) into {root}")
    vocab: dict[str, int] = {}
    train, _, test = (tokenize(p, vocab) for p in paths)
    for what, got, official in (("training tokens", len(train), WIKITEXT_TRAIN_TOKENS),
                                ("test tokens", len(test), WIKITEXT_TEST_TOKENS)):
        if got != official:
            raise DatasetError(f"wikitext2 from {folder}: {got:,} {what}, the official set {official:,}")
    (train_x, train_y), (test_x, test_y) = sequences(train, str(paths[0])), sequences(test, str(paths[2]))
    return RawData(train_x, train_y, test_x, test_y, num_classes=len(vocab))


def text_spec(name: str) -> DatasetSpec:
    path = Path(name.removeprefix("text:")).expanduser()

    def read(root: Path) -> RawData:
        vocab: dict[str, int] = {}
        tokens = tokenize(path, vocab)
        cut = len(tokens) - int(len(tokens) * TEXT_TEST_SHARE)
        (train_x, train_y), (test_x, test_y) = sequences(tokens[:cut], f"{path} (first 90%)"), \
            sequences(tokens[cut:], f"{path} (last 10%)")
        return RawData(train_x, train_y, test_x, test_y, num_classes=len(vocab))
    return DatasetSpec(name=name, reader=read, sample_shape=(SEQ_LEN,), num_classes=None, source=f"the text file {path}",
                       tokens=True, sequence_targets=True, cached=False)


register_dataset(DatasetSpec(
    name="wikitext2", reader=read_wikitext2, sample_shape=(SEQ_LEN,), num_classes=WIKITEXT_VOCAB,
    source=f"wikitext-2-v1.zip unzipped ({WIKITEXT_DIR}/wiki.train.tokens, wiki.valid.tokens, wiki.test.tokens)",
    tokens=True, sequence_targets=True, train_size=(WIKITEXT_TRAIN_TOKENS - 1) // SEQ_LEN,
    test_size=(WIKITEXT_TEST_TOKENS - 1) // SEQ_LEN))
register_family("text:", text_spec)
