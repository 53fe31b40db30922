"""Pre-train a Llama-style model built from its transformers config, in a loop of one's own, left untuned.

A model made with ``LlamaForCausalLM(LlamaConfig(...))`` (no download: the architecture from its
config, weights from scratch) with its attention asked for as ``"eager"``, trained on windows of
a token array in a hand-written loop: fp32, AdamW with its defaults, ``loss.item()`` every step
for the log. The tokens are synthetic, a walk of a fixed random Markov chain over a
32,000-token vocabulary (Llama 2's size), so the loss falls as the model learns it.

    python3 examples/llama_from_config.py
    python3 examples/llama_from_config.py --device cpu --hidden 64 --layers 2 --heads 4 --seq 64 --batch-size 4 --steps 20
"""

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=None, help="default: 2.75x hidden, as Llama's")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tokens", type=int, default=4_000_000, help="length of the synthetic token array")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.intermediate = args.intermediate or int(args.hidden * 2.75)
    return args


def markov_tokens(n, vocab_size, seed):
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, vocab_size, (vocab_size, 4), generator=g)   # four likely successors each
    pick = torch.randint(0, 4, (n,), generator=g)
    out = torch.empty(n, dtype=torch.long)
    tok = 0
    for i in range(n):
        out[i] = tok
        tok = int(nxt[tok, pick[i]])
    return out


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab_size, hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         max_position_embeddings=args.seq)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).to(args.device)
    print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, attention {config._attn_implementation}")
    data = markov_tokens(min(args.tokens, 200_000 if args.device == "cpu" else args.tokens), args.vocab_size, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model.train()
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        ix = torch.randint(0, len(data) - args.seq, (args.batch_size,))
        batch = torch.stack([data[i:i + args.seq] for i in ix]).to(args.device)
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    elapsed = time.perf_counter() - start
    print(f"done: {args.steps} steps, {args.steps * args.batch_size * args.seq / elapsed:.0f} tokens/s")


if __name__ == "__main__":
    main()
