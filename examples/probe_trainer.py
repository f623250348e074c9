# A Hugging Face Trainer run (tiny Llama, random weights) recorded by normlab.torch.TrainerCallback.
import sys, torch, transformers, normlab.torch

torch.manual_seed(0)
out = sys.argv[1] if len(sys.argv) > 1 else "runs/trainer"
cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                               max_position_embeddings=16, pad_token_id=None)
model = transformers.LlamaForCausalLM(cfg)
nxt = torch.randint(0, 64, (64, 3))                   # a random Markov chain to learn


def sequence(i):
    g = torch.Generator().manual_seed(i)
    x = [int(torch.randint(0, 64, (1,), generator=g))]
    for _ in range(15):
        x.append(int(nxt[x[-1], torch.randint(0, 3, (1,), generator=g)]))
    return {"input_ids": torch.tensor(x), "labels": torch.tensor(x)}


args = transformers.TrainingArguments(
    out + "-hf", max_steps=40, per_device_train_batch_size=4, gradient_accumulation_steps=2,
    learning_rate=3e-3, lr_scheduler_type="linear", warmup_steps=4, weight_decay=0.1,
    max_grad_norm=1.0, logging_steps=1, eval_strategy="steps", eval_steps=20,
    train_sampling_strategy="sequential", report_to=[], save_strategy="no", use_cpu=True)
trainer = transformers.Trainer(
    model=model, args=args, train_dataset=[sequence(i) for i in range(320)],
    eval_dataset=[sequence(10_000 + i) for i in range(8)],
    callbacks=[normlab.torch.TrainerCallback(out=out, interval=10)])
trainer.train()
