"""Fine-tune a GPT-2-small-size causal LM with the Hugging Face Trainer on texts padded to the model's length, left untuned.

As a first fine-tune is often written: every text padded to the longest the model takes (the
tokenizer's ``padding="max_length"``), so each batch is 512 tokens wide while about 70% of them
are padding; the model's attention asked for as ``"eager"``; fp32 and the Trainer's other
defaults. The texts are synthetic token ids (no downloads): lengths as in a corpus of reviews,
mostly short, a few filling the context, each text a walk of a fixed random Markov chain so
the loss falls as the model learns it.

    python3 examples/gpt2_trainer_padded.py
    python3 examples/gpt2_trainer_padded.py --device cpu --n-layer 2 --n-embd 64 --n-head 4 --max-length 64 --max-steps 20
"""

import argparse
import tempfile

import torch
from transformers import AutoModelForCausalLM, GPT2Config, Trainer, TrainingArguments


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--n-layer", type=int, default=12)
    p.add_argument("--n-embd", type=int, default=768)
    p.add_argument("--n-head", type=int, default=12)
    p.add_argument("--vocab-size", type=int, default=50257)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-steps", type=int, default=400)
    p.add_argument("--texts", type=int, default=20000)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


class PaddedTexts(torch.utils.data.Dataset):
    """Texts of varied length, each padded to max_length: input_ids (the pad id past the text),
    attention_mask, and labels (-100 at the padding, as a collator for causal LM leaves them)."""

    def __init__(self, n, max_length, vocab_size, seed):
        g = torch.Generator().manual_seed(seed)
        # 95% of the texts 16 to max_length/2 tokens, 5% filling the context
        short = torch.randint(16, max_length // 2 + 1, (n,), generator=g)
        self.lengths = torch.where(torch.rand(n, generator=g) < 0.05, torch.full((n,), max_length), short)
        self.next_token = torch.randint(0, vocab_size - 1, (vocab_size,), generator=g)  # the chain
        self.starts = torch.randint(0, vocab_size - 1, (n,), generator=g)
        self.max_length, self.pad = max_length, vocab_size - 1   # GPT-2 pads with its last id

    def __len__(self):
        return len(self.lengths)

    def __getitem__(self, i):
        n = int(self.lengths[i])
        ids = torch.full((self.max_length,), self.pad, dtype=torch.long)
        tok = int(self.starts[i])
        for j in range(n):
            ids[j] = tok
            tok = int(self.next_token[tok])
        mask = (torch.arange(self.max_length) < n).long()
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}


def main(argv=None):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    config = GPT2Config(vocab_size=args.vocab_size, n_positions=args.max_length, n_embd=args.n_embd,
                        n_layer=args.n_layer, n_head=args.n_head)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    train = PaddedTexts(args.texts, args.max_length, args.vocab_size, args.seed)
    real = float(train.lengths.sum()) / (len(train) * args.max_length)
    print(f"{len(train)} texts padded to {args.max_length} tokens: {1 - real:.0%} of the tokens are padding")
    with tempfile.TemporaryDirectory() as out:
        training_args = TrainingArguments(
            output_dir=out,
            per_device_train_batch_size=args.batch_size,
            learning_rate=args.lr,
            max_steps=args.max_steps,
            logging_steps=max(1, args.max_steps // 20),
            save_strategy="no",
            report_to="none",
            seed=args.seed,
            use_cpu=args.device == "cpu",
        )
        trainer = Trainer(model=model, args=training_args, train_dataset=train)
        result = trainer.train()
    m = result.metrics
    print(f"done: {result.global_step} steps, loss {result.training_loss:.4f}, "
          f"{m['train_samples_per_second']:.1f} samples/s")


if __name__ == "__main__":
    main()
