"""A small GPT language model trained the nanoGPT way, on synthetic tokens, left untuned.

After Karpathy's nanoGPT train.py: no DataLoader (get_batch() samples random windows of a token
array and copies them over), a `while True` loop over iterations with gradient accumulation
(several forward/backward passes per optimizer step), a cosine learning-rate schedule written
into the param groups, gradient clipping, AdamW, `loss.item()` logged every few iterations and
an evaluation pass every eval_interval iterations. Left as a first version is: fp32 (no
autocast), no torch.compile, AdamW without fused/foreach flags, pageable host memory.

The tokens are synthetic (no downloads): a fixed random Markov chain over the vocabulary, so the
loss falls below log(vocab_size) as the model learns the transitions.

    python3 examples/gpt_lm.py
    python3 examples/gpt_lm.py --max-iters 20 --batch-size 4 --block-size 64 --n-layer 2 --device cpu
"""

import argparse
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batch-size", type=int, default=None, help="micro-batch; default 32 on cuda, 4 on cpu")
    p.add_argument("--grad-accum", type=int, default=4, help="micro-batches per optimizer step")
    p.add_argument("--block-size", type=int, default=None, help="context length; default 256 on cuda, 64 on cpu")
    p.add_argument("--n-layer", type=int, default=None)
    p.add_argument("--n-head", type=int, default=8)
    p.add_argument("--n-embd", type=int, default=None)
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa",
                   help="manual: q @ k^T, mask, softmax, @ v, as nanoGPT does without flash attention")
    p.add_argument("--tokens", type=int, default=2_000_000, help="length of the synthetic token array")
    p.add_argument("--max-iters", type=int, default=600)
    p.add_argument("--lr", type=float, default=6e-4)
    p.add_argument("--warmup-iters", type=int, default=20)
    p.add_argument("--eval-interval", type=int, default=200)
    p.add_argument("--eval-iters", type=int, default=10)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--seed", type=int, default=1337)
    args = p.parse_args(argv)
    on_gpu = args.device.startswith("cuda")
    args.batch_size = args.batch_size or (32 if on_gpu else 4)
    args.block_size = args.block_size or (256 if on_gpu else 64)
    args.n_layer = args.n_layer or (6 if on_gpu else 2)
    args.n_embd = args.n_embd or (512 if on_gpu else 64)
    return args


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, manual=False):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head
        self.manual = manual

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.manual:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            att = F.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
            y = att @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, manual=False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, manual)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, manual_attention=False):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, manual_attention) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def make_tokens(n, vocab_size, seed):
    """A random Markov chain: each token has 8 likely successors."""
    rng = np.random.default_rng(seed)
    succ = rng.integers(0, vocab_size, size=(vocab_size, 8))
    choice = rng.integers(0, 8, size=n)
    out = np.empty(n, dtype=np.uint16)
    tok = 0
    for i in range(n):
        tok = succ[tok, choice[i]]
        out[i] = tok
    return out


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    device = args.device
    data = make_tokens(args.tokens, args.vocab_size, args.seed)
    split = int(0.9 * len(data))
    train_data, val_data = data[:split], data[split:]

    def get_batch(which):
        d = train_data if which == "train" else val_data
        ix = torch.randint(len(d) - args.block_size, (args.batch_size,))
        x = torch.stack([torch.from_numpy(d[i:i + args.block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(d[i + 1:i + 1 + args.block_size].astype(np.int64)) for i in ix])
        return x.to(device), y.to(device)

    model = GPT(args.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd,
                manual_attention=args.attention == "manual").to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1)
    print(f"gpt_lm: device={device} params={sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
          f"batch={args.batch_size}x{args.grad_accum} block={args.block_size}", flush=True)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for which in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                _, loss = model(*get_batch(which))
                losses[k] = loss.item()
            out[which] = losses.mean().item()
        model.train()
        return out

    def get_lr(it):
        if it < args.warmup_iters:
            return args.lr * (it + 1) / (args.warmup_iters + 1)
        ratio = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
        return 0.1 * args.lr + 0.45 * args.lr * (1.0 + math.cos(math.pi * min(1.0, ratio)))

    X, Y = get_batch("train")
    t0 = time.time()
    iter_num = 0
    while True:
        lr = get_lr(iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num > 0 and iter_num % args.eval_interval == 0:
            losses = estimate_loss()
            print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        for _ in range(args.grad_accum):
            _, loss = model(X, Y)
            loss = loss / args.grad_accum
            X, Y = get_batch("train")  # the next micro-batch, while the GPU works on this one
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if iter_num % args.log_interval == 0:
            print(f"iter {iter_num}: loss {loss.item() * args.grad_accum:.4f}, time {dt * 1000:.2f}ms", flush=True)
        iter_num += 1
        if iter_num >= args.max_iters:
            break


if __name__ == "__main__":
    main()
