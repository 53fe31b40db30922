"""
Builds the character-level dataset train.py reads: data/<dataset>/{train.bin,val.bin,meta.pkl}
under the current directory, uint16 token ids and the vocabulary.

Upstream's data/shakespeare_char/prepare.py downloads tiny-shakespeare; this corpus copy writes a
synthetic text instead (no network): words made of the 65 shakespeare characters, drawn with a
Zipf law and joined with spaces and newlines, so a model has something to learn.

    python prepare.py                     # data/shakespeare_char/ in the current directory
    python prepare.py --n_chars=2000000
"""
import os
import pickle
import sys

import numpy as np

CHARS = list("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")  # 65


def synthesize(data_dir, n_chars=1_115_394, n_words=3000, seed=1337):
    rng = np.random.default_rng(seed)
    stoi = {ch: i for i, ch in enumerate(CHARS)}
    itos = {i: ch for i, ch in enumerate(CHARS)}
    letters = np.array([stoi[c] for c in CHARS if c.isalpha()], dtype=np.uint16)

    # a lexicon of words, each 1-10 letters
    lengths = rng.integers(1, 11, size=n_words)
    lexicon = [rng.choice(letters, size=n) for n in lengths]
    # Zipf-like word frequencies
    p = 1.0 / np.arange(1, n_words + 1) ** 1.1
    p /= p.sum()

    pieces = []
    total = 0
    space, newline = stoi[' '], stoi['\n']
    while total < n_chars:
        ids = rng.choice(n_words, size=65536, p=p)
        seps = np.where(rng.random(65536) < 0.08, newline, space).astype(np.uint16)
        for w, s in zip(ids, seps):
            pieces.append(lexicon[w])
            pieces.append(np.array([s], dtype=np.uint16))
            total += len(lexicon[w]) + 1
            if total >= n_chars:
                break
    data = np.concatenate(pieces)[:n_chars].astype(np.uint16)

    n = len(data)
    train_ids = data[:int(n * 0.9)]
    val_ids = data[int(n * 0.9):]
    print(f"vocab size: {len(CHARS)}")
    print(f"train has {len(train_ids):,} tokens")
    print(f"val has {len(val_ids):,} tokens")

    os.makedirs(data_dir, exist_ok=True)
    # write to temporary names first, so a reader never sees half a file
    train_ids.tofile(os.path.join(data_dir, 'train.bin.tmp'))
    val_ids.tofile(os.path.join(data_dir, 'val.bin.tmp'))
    with open(os.path.join(data_dir, 'meta.pkl.tmp'), 'wb') as f:
        pickle.dump({'vocab_size': len(CHARS), 'itos': itos, 'stoi': stoi}, f)
    for name in ('meta.pkl', 'val.bin', 'train.bin'):
        os.replace(os.path.join(data_dir, name + '.tmp'), os.path.join(data_dir, name))


if __name__ == '__main__':
    dataset = 'shakespeare_char'
    n_chars = 1_115_394
    for arg in sys.argv[1:]:
        key, val = arg.lstrip('-').split('=', 1)
        if key == 'dataset':
            dataset = val
        elif key == 'n_chars':
            n_chars = int(val)
        else:
            raise ValueError(f"unknown argument {arg}")
    synthesize(os.path.join('data', dataset), n_chars=n_chars)
