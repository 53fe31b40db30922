#!/usr/bin/env python
# coding=utf-8
"""
Fine-tuning a BERT-style model for sequence classification with the 🤗 Trainer, laid out like
the text-classification examples (run_glue.py): dataclass arguments parsed by HfArgumentParser
together with TrainingArguments, a main() that sets up logging, the seed, the data, the model
and the Trainer, then trains and evaluates.

This corpus copy downloads nothing: the model is built from a BertConfig (random init) and the
dataset is synthetic token ids with labels the model can learn.

    python train.py --do_train --do_eval --max_steps 200 --per_device_train_batch_size 32
"""

import logging
import os
import sys
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from torch.utils.data import Dataset

import transformers
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    EvalPrediction,
    HfArgumentParser,
    Trainer,
    TrainingArguments,
    set_seed,
)
from transformers.trainer_utils import get_last_checkpoint

logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """
    The shape of the BERT-style encoder, built from scratch from a BertConfig.
    """

    hidden_size: int = field(default=256, metadata={"help": "Hidden size of the encoder (256-768)."})
    num_hidden_layers: int = field(default=4, metadata={"help": "Number of transformer layers."})
    num_attention_heads: int = field(default=4, metadata={"help": "Number of attention heads."})
    intermediate_size: Optional[int] = field(
        default=None, metadata={"help": "Feed-forward size; 4 x hidden_size when not given."}
    )
    vocab_size: int = field(default=30522, metadata={"help": "Vocabulary size (BERT's WordPiece by default)."})
    hidden_dropout_prob: float = field(default=0.1, metadata={"help": "Dropout in the encoder."})
    attn_implementation: Optional[str] = field(
        default=None, metadata={"help": "Attention implementation: 'eager' or 'sdpa' (the library picks when unset)."}
    )


@dataclass
class DataTrainingArguments:
    """
    The synthetic classification data: what goes into the model for training and eval.
    """

    max_seq_length: int = field(
        default=128,
        metadata={"help": "The maximum total input sequence length; shorter sequences are padded."},
    )
    num_labels: int = field(default=4, metadata={"help": "Number of classes."})
    num_train_samples: int = field(default=20000, metadata={"help": "Size of the training set."})
    num_eval_samples: int = field(default=1000, metadata={"help": "Size of the evaluation set."})
    min_seq_length: int = field(default=32, metadata={"help": "Shortest unpadded sequence."})


class SyntheticClassificationDataset(Dataset):
    """Token sequences of varying length, padded to max_seq_length. Each class draws most of its
    tokens from its own band of the vocabulary, so the label can be learned from the content."""

    def __init__(self, num_samples, max_seq_length, vocab_size, num_labels, min_seq_length=32, seed=0):
        self.num_samples = num_samples
        self.max_seq_length = max_seq_length
        self.vocab_size = vocab_size
        self.num_labels = num_labels
        self.min_seq_length = min(min_seq_length, max_seq_length)
        self.seed = seed
        # [CLS]=101, [SEP]=102, [PAD]=0 as in BERT's vocabulary; content tokens start at 1000
        self.first_token = 1000 if vocab_size > 2000 else 3
        self.band = (vocab_size - self.first_token) // num_labels

    def __len__(self):
        return self.num_samples

    def __getitem__(self, idx):
        rng = np.random.default_rng(self.seed * 1_000_003 + idx)
        label = int(rng.integers(self.num_labels))
        length = int(rng.integers(self.min_seq_length, self.max_seq_length + 1))
        n_content = length - 2
        in_band = rng.random(n_content) < 0.3
        band_start = self.first_token + label * self.band
        tokens = np.where(
            in_band,
            rng.integers(band_start, band_start + self.band, size=n_content),
            rng.integers(self.first_token, self.vocab_size, size=n_content),
        )
        cls_id, sep_id = (101, 102) if self.vocab_size > 2000 else (1, 2)
        input_ids = np.zeros(self.max_seq_length, dtype=np.int64)
        input_ids[0] = cls_id
        input_ids[1:length - 1] = tokens
        input_ids[length - 1] = sep_id
        attention_mask = np.zeros(self.max_seq_length, dtype=np.int64)
        attention_mask[:length] = 1
        return {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(attention_mask),
            "labels": torch.tensor(label, dtype=torch.long),
        }


def main():
    # See all possible arguments in src/transformers/training_args.py
    # or by passing the --help flag to this script.
    parser = HfArgumentParser((ModelArguments, DataTrainingArguments, TrainingArguments))
    # this corpus copy: an output_dir under the working directory, no checkpoints, no reporting
    # integrations, unless asked for on the command line
    parser.set_defaults(output_dir="./bert_synthetic_output", save_strategy="no", report_to="none",
                        logging_steps=10)
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        # one argument, a json file: the arguments are in it
        model_args, data_args, training_args = parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    else:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses()

    # Setup logging
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%m/%d/%Y %H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )

    if training_args.should_log:
        # The default of training_args.log_level is passive, so we set log level at info here to have that default.
        transformers.utils.logging.set_verbosity_info()

    log_level = training_args.get_process_log_level()
    logger.setLevel(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()

    # Log on each process the small summary:
    logger.warning(
        f"Process rank: {training_args.local_process_index}, device: {training_args.device}, "
        f"n_gpu: {training_args.n_gpu}, distributed training: {training_args.parallel_mode.value == 'distributed'}, "
        f"16-bits training: {training_args.fp16 or training_args.bf16}"
    )
    logger.info(f"Training/evaluation parameters {training_args}")

    # Detecting last checkpoint.
    last_checkpoint = None
    if os.path.isdir(training_args.output_dir) and training_args.do_train:
        last_checkpoint = get_last_checkpoint(training_args.output_dir)
        if last_checkpoint is not None and training_args.resume_from_checkpoint is None:
            logger.info(
                f"Checkpoint detected, resuming training at {last_checkpoint}. To avoid this behavior, change "
                "the `--output_dir` or remove the checkpoints."
            )

    # Set seed before initializing model.
    set_seed(training_args.seed)

    # Datasets: synthetic, built in memory
    train_dataset = SyntheticClassificationDataset(
        data_args.num_train_samples, data_args.max_seq_length, model_args.vocab_size, data_args.num_labels,
        min_seq_length=data_args.min_seq_length, seed=training_args.seed,
    )
    eval_dataset = SyntheticClassificationDataset(
        data_args.num_eval_samples, data_args.max_seq_length, model_args.vocab_size, data_args.num_labels,
        min_seq_length=data_args.min_seq_length, seed=training_args.seed + 1,
    )

    # Model: a BERT encoder with a classification head, from a config (no pretrained weights)
    config = BertConfig(
        vocab_size=model_args.vocab_size,
        hidden_size=model_args.hidden_size,
        num_hidden_layers=model_args.num_hidden_layers,
        num_attention_heads=model_args.num_attention_heads,
        intermediate_size=model_args.intermediate_size or 4 * model_args.hidden_size,
        hidden_dropout_prob=model_args.hidden_dropout_prob,
        max_position_embeddings=max(512, data_args.max_seq_length),
        num_labels=data_args.num_labels,
        problem_type="single_label_classification",
    )
    if model_args.attn_implementation is not None:
        config._attn_implementation = model_args.attn_implementation
    model = BertForSequenceClassification(config)
    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"Training new model from scratch - Total size={n_params / 2**20:.2f}M params")

    for index in np.random.choice(len(train_dataset), 2, replace=False):
        sample = train_dataset[int(index)]
        logger.info(f"Sample {index} of the training set: label {int(sample['labels'])}, "
                    f"length {int(sample['attention_mask'].sum())}, ids {sample['input_ids'][:12].tolist()}...")

    def compute_metrics(p: EvalPrediction):
        preds = p.predictions[0] if isinstance(p.predictions, tuple) else p.predictions
        preds = np.argmax(preds, axis=1)
        return {"accuracy": (preds == p.label_ids).astype(np.float32).mean().item()}

    # Initialize our Trainer
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset if training_args.do_train else None,
        eval_dataset=eval_dataset if training_args.do_eval else None,
        compute_metrics=compute_metrics,
    )

    # Training
    if training_args.do_train:
        checkpoint = None
        if training_args.resume_from_checkpoint is not None:
            checkpoint = training_args.resume_from_checkpoint
        elif last_checkpoint is not None:
            checkpoint = last_checkpoint
        train_result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics = train_result.metrics
        metrics["train_samples"] = len(train_dataset)

        if training_args.save_strategy != "no":
            trainer.save_model()  # Saves the tokenizer too for easy upload
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()

    # Evaluation
    if training_args.do_eval:
        logger.info("*** Evaluate ***")
        metrics = trainer.evaluate(eval_dataset=eval_dataset)
        metrics["eval_samples"] = len(eval_dataset)
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)


def _mp_fn(index):
    # For xla_spawn (TPUs)
    main()


if __name__ == "__main__":
    main()
