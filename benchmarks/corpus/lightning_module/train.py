"""Train a small ResNet on CIFAR-10-shaped synthetic data with Lightning.

    python train.py --batch_size 256 --num_workers 8 --precision bf16-mixed
"""
import argparse

import lightning as L
import torch

from data import CIFARDataModule
from model import LitResNet


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--num_workers", type=int, default=2)
    parser.add_argument("--max_epochs", type=int, default=30)
    parser.add_argument("--precision", type=str, default="32-true",
                        help='"32-true", "16-mixed", "bf16-mixed", ...')
    parser.add_argument("--accelerator", type=str, default="auto", help='"cpu", "gpu" or "auto"')
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--width", type=int, default=64, help="channels of the first stage")
    parser.add_argument("--train_size", type=int, default=50000)
    parser.add_argument("--val_size", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--test", action="store_true", help="run the test set after fitting")
    return parser.parse_args()


def main():
    args = parse_args()
    L.seed_everything(args.seed)

    dm = CIFARDataModule(batch_size=args.batch_size, num_workers=args.num_workers,
                         train_size=args.train_size, val_size=args.val_size)
    model = LitResNet(num_classes=dm.num_classes, width=args.width, lr=args.lr)

    trainer = L.Trainer(
        max_epochs=args.max_epochs,
        accelerator=args.accelerator,
        devices=1,
        precision=args.precision,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(model, datamodule=dm)
    if args.test:
        trainer.test(model, datamodule=dm)


if __name__ == "__main__":
    main()
