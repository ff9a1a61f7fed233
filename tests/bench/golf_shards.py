"""golf_shards.py — synthetic parameter-golf data for the whole-step benchmark against train_gpt.py:
trains a SentencePiece BPE model (vocab 1024, as the sp1024 tokenizer) on the text files given,
encodes them, and writes fineweb_train_*.bin / fineweb_val_*.bin shards in the parameter-golf /
llm.c format (256 int32 header: magic 20240520, version 1, token count; then uint16 tokens), the
encoded text repeated until each shard has its token count. With --held-out, the files after it
make the validation shard alone (text the model never trains on, for the convergence comparison;
the tokenizer is trained on the training text only); without it, train and val are consecutive
spans of the one repeated stream. With --bos (before the text files), each text file is a
document that starts with the model's BOS id (1), as parameter-golf's shards start each document:
what document packing and the BOS-masked SmearGate need.
Usage: golf_shards.py OUT_DIR TRAIN_TOKENS VAL_TOKENS [--bos] TEXT_FILE... [--held-out TEXT_FILE...]
"""
import os
import sys

import numpy as np
import sentencepiece as spm


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def read_texts(paths):
    parts = []
    for t in paths:
        with open(t, encoding="utf-8", errors="replace") as g:
            parts.append(g.read())
    return "\n".join(parts) + "\n"


def main():
    out, train_tokens, val_tokens, texts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    bos = texts[:1] == ["--bos"]
    texts = texts[1:] if bos else texts
    held_out = []
    if "--held-out" in texts:
        at = texts.index("--held-out")
        texts, held_out = texts[:at], texts[at + 1:]
        if not held_out:
            sys.exit("golf_shards: --held-out names no file")
    os.makedirs(out, exist_ok=True)
    corpus = os.path.join(out, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(read_texts(texts))
    prefix = os.path.join(out, "sp1024")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=1024, model_type="bpe",
                                   character_coverage=1.0, byte_fallback=True, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")

    def encode(paths):  # one stream; with --bos a BOS before each file's tokens
        if not bos:
            return np.asarray(sp.encode(read_texts(paths)), dtype=np.uint16)
        return np.asarray([t for p in paths for t in [sp.bos_id()] + sp.encode(read_texts([p]))], dtype=np.uint16)

    ids = encode(texts)
    if held_out:
        val_ids = encode(held_out)
        write_shard(os.path.join(out, "fineweb_train_000000.bin"), np.tile(ids, train_tokens // len(ids) + 1)[:train_tokens])
        write_shard(os.path.join(out, "fineweb_val_000000.bin"), np.tile(val_ids, val_tokens // len(val_ids) + 1)[:val_tokens])
    else:
        reps = (train_tokens + val_tokens) // len(ids) + 2
        stream = np.tile(ids, reps)
        write_shard(os.path.join(out, "fineweb_train_000000.bin"), stream[:train_tokens])
        write_shard(os.path.join(out, "fineweb_val_000000.bin"), stream[train_tokens:train_tokens + val_tokens])
    print(f"golf_shards: sp1024 model and {train_tokens} train + {val_tokens} val tokens in {out}")


if __name__ == "__main__":
    main()
