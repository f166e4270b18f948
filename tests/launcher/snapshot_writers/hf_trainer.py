"""Hugging Face's Trainer on CPU under ddprun (DDP over gloo: the Trainer reads the launcher's
environment): a tiny GPT-2 built from a config (no download), saved every SAVE_EVERY steps into
checkpoint-<step> folders of output_dir, resumed with resume_from_checkpoint=True (the newest
one) when there is one. The only change for ddprun: output_dir is DDPRUN_SNAPSHOT_DIR.
Usage: hf_trainer.py STEPS SAVE_EVERY"""
import glob
import os
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments, set_seed

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402


class Probe(TrainerCallback):
    """The test's lines (probe.py): where train() starts, and each step's parameters."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        probe.resumed(state.global_step, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        probe.step_done(state.global_step, model)


def main():
    steps, save_every = int(sys.argv[1]), int(sys.argv[2])
    output_dir = os.environ["DDPRUN_SNAPSHOT_DIR"]
    set_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                                                bos_token_id=0, eos_token_id=0))
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, 64, (32, 16), generator=g)
    train_dataset = [{"input_ids": t, "labels": t} for t in tokens]
    args = TrainingArguments(output_dir=output_dir, max_steps=steps, save_strategy="steps", save_steps=save_every,
                             per_device_train_batch_size=4, learning_rate=1e-3, seed=0, use_cpu=True,
                             report_to="none", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=train_dataset, callbacks=[Probe()])
    trainer.train(resume_from_checkpoint=True if glob.glob(os.path.join(output_dir, "checkpoint-*")) else None)


if __name__ == "__main__":
    main()
