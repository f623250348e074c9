"""One process of tests/py/test_probe_trainers_dist.py, started as torchrun would (RANK,
WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in the environment): the tiny Llama of
probe_fixtures trained STEPS steps under DDP on 2 processes (gloo, CPU) by transformers.Trainer
with normlab.torch.TrainerCallback ("trainer": accelerate picks DDP up from the environment) and
by Lightning with normlab.torch.LightningCallback ("lightning": strategy "ddp", the processes
started outside Lightning, as under torchrun). Both: ACCUM micro-batches of one sequence per
process and optimizer step, AdamW, clipping at 1.0, a constant learning rate. Process r writes
its run to OUT/MODE.r{r} (the probe writes on process 0 only) and the input_ids of each of its
forwards with gradients, in order, to OUT/MODE.seen{r}.pt: the test's single-process reference
trains on what the processes saw. Usage: probe_trainers_dist_worker.py OUT MODE[,MODE...]"""
from __future__ import annotations

import os
import sys

import torch

torch.set_num_threads(1)
import normlab.torch as ntorch  # noqa: E402
from probe_fixtures import V, hf_model, markov_batches  # noqa: E402

STEPS, INTERVAL, ACCUM, LR, CLIP = 6, 2, 2, 3e-3, 1.0


def sequences(world: int) -> torch.Tensor:
    """STEPS * ACCUM * world sequences of 16 tokens."""
    idx, _ = markov_batches(STEPS, b=ACCUM * world)
    return idx.reshape(-1, idx.shape[-1])


def recorder(model: torch.nn.Module, seen: list[torch.Tensor]) -> None:
    def pre(module, args, kwargs):
        if torch.is_grad_enabled():
            x = kwargs.get("input_ids", args[0] if args else None)
            seen.append(x.detach().clone())
    model.register_forward_pre_hook(pre, with_kwargs=True)


def trainer(out: str, rank: int, world: int) -> None:
    import transformers
    model = hf_model("llama")
    seen: list[torch.Tensor] = []
    recorder(model, seen)
    data = [{"input_ids": x, "labels": x} for x in sequences(world)]
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    args = transformers.TrainingArguments(
        os.path.join(out, "trainer-hf"), max_steps=STEPS, per_device_train_batch_size=1,
        gradient_accumulation_steps=ACCUM, learning_rate=LR, lr_scheduler_type="constant",
        max_grad_norm=CLIP, logging_steps=1, train_sampling_strategy="sequential",
        report_to=[], save_strategy="no", use_cpu=True, ddp_backend="gloo", disable_tqdm=True)
    cb = ntorch.TrainerCallback(out=os.path.join(out, f"trainer.r{rank}"), interval=INTERVAL,
                                per_head=True)
    t = transformers.Trainer(model=model, args=args, train_dataset=data, optimizers=(opt, None),
                             callbacks=[cb])
    t.train()
    assert t.args.world_size == world and type(t.model_wrapped).__name__ == \
        "DistributedDataParallel", (t.args.world_size, type(t.model_wrapped))
    torch.save({"seen": seen, "log": t.state.log_history},
               os.path.join(out, f"trainer.seen{rank}.pt"))


def lightning(out: str, rank: int, world: int) -> None:
    import lightning.pytorch as L

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = hf_model("llama")

        def training_step(self, batch, i):
            self.wrapper = type(self.trainer.strategy.model).__name__
            logits = self.model(input_ids=batch).logits
            return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V),
                                                     batch[:, 1:].reshape(-1))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=LR, weight_decay=0.1)

    module = Module()
    seen: list[torch.Tensor] = []
    recorder(module.model, seen)
    data = torch.utils.data.DataLoader(sequences(world), batch_size=1, shuffle=False)
    t = L.Trainer(max_steps=STEPS, accumulate_grad_batches=ACCUM, gradient_clip_val=CLIP,
                  accelerator="cpu", devices=world, strategy="ddp", enable_checkpointing=False,
                  logger=False, enable_progress_bar=False, enable_model_summary=False,
                  callbacks=[ntorch.LightningCallback(out=os.path.join(out, f"lightning.r{rank}"),
                                                      interval=INTERVAL, per_head=True)])
    t.fit(module, data)
    assert t.world_size == world and module.wrapper == "DistributedDataParallel", (
        t.world_size, module.wrapper)
    torch.save({"seen": seen}, os.path.join(out, f"lightning.seen{rank}.pt"))


def main() -> None:
    out, modes = sys.argv[1], sys.argv[2].split(",")
    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    for mode in modes:
        {"trainer": trainer, "lightning": lightning}[mode](out, rank, world)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()  # an error raises here and exits non-zero
    # The work is done and written: leave without the interpreter's teardown, where gloo's threads
    # abort the process in about 1 run of 8 ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
