// The names other trainers use for configuration keys (nanoGPT, Hugging Face, OLMo, Llama), each
// with the normlab key that does the same or what normlab does instead (config/keys.h: ForeignKey).
#include <string_view>

#include "config/keys.h"

namespace normlab::keytab {

// ---- Names from other trainers ----------------------------------------------------------------

// The names a nanoGPT, Hugging Face or OLMo user types (nanoGPT's train.py and GPTConfig, HF's
// config.json and TrainingArguments, OLMo's model and trainer configs, Llama's params.json), in
// whatever section they are put: each with the normlab key that does the same, or none and what
// normlab does instead. Names the nearness rule finds need no row (`n_heads` -> `n_head`,
// `warmup` -> `warmup_steps`); a row never bears the name of a normlab key, and names one that
// exists (a test checks both).
namespace {
constexpr std::string_view no_dropout =
    "normlab has no dropout layers (training and evaluation run without, as with nanoGPT's "
    "pre-training default dropout = 0.0)";
constexpr std::string_view logs =
    "normlab writes RUN/metrics.jsonl and metrics.csv (normlab report draws them)";
constexpr ForeignKey foreign_table[] = {
    // nanoGPT
    {"n_embd", "model.d_model", ""},
    {"block_size", "model.seq_len", ""},
    {"dropout", "", no_dropout},
    {"learning_rate", "optim.lr", ""},
    {"max_iters", "train.steps", ""},
    {"iters", "train.steps", ""},
    {"warmup_iters", "optim.warmup_steps", ""},
    {"lr_decay_iters", "",
     "the decay runs to the end of the run, train.steps (optim.schedule = cosine, linear or "
     "constant)"},
    {"min_lr", "optim.min_lr_ratio", "a fraction of optim.lr, not a learning rate"},
    {"decay_lr", "optim.schedule", "\"constant\" for no decay"},
    {"eval_iters", "train.eval_batches", ""},
    {"gradient_accumulation_steps", "train.grad_accum", "micro-batches per step on each rank"},
    {"always_save_checkpoint", "train.checkpoint_interval",
     "a checkpoint every N steps and at the end of the run"},
    {"eval_only", "", "evaluate a checkpoint with normlab eval --checkpoint RUN"},
    {"out_dir", "", "the run directory is the command line's --out RUN"},
    {"dataset", "data.path", "a text file, a folder of them or a token file"},
    {"wandb_log", "", logs},
    {"wandb_project", "", logs},
    {"wandb_run_name", "", logs},
    {"device", "", "normlab trains on the CPU (train.threads; several processes: mpirun)"},
    {"backend", "", "data-parallel runs start with mpirun -np N (dist.deterministic, "
                    "dist.bucket_size)"},
    {"compile", "", "normlab is compiled C++: there is no graph to compile"},
    {"dtype", "train.matmul_precision",
     "float32 or bf16 matrix products; parameters and optimizer state stay float32"},
    // Hugging Face config.json
    {"hidden_size", "model.d_model", ""},
    {"dim", "model.d_model", ""},
    {"num_hidden_layers", "model.n_layer", ""},
    {"num_layers", "model.n_layer", ""},
    {"layers", "model.n_layer", ""},
    {"depth", "model.n_layer", ""},
    {"heads", "model.n_head", ""},
    {"norm_type", "model.norm", ""},
    {"num_attention_heads", "model.n_head", ""},
    {"num_heads", "model.n_head", ""},
    {"num_key_value_heads", "model.n_kv_head", ""},
    {"intermediate_size", "model.d_ff", ""},
    {"n_inner", "model.d_ff", ""},
    {"mlp_hidden_size", "model.d_ff", ""},
    {"max_position_embeddings", "model.seq_len", ""},
    {"n_positions", "model.seq_len", ""},
    {"n_ctx", "model.seq_len", ""},
    {"context_length", "model.seq_len", ""},
    {"max_sequence_length", "model.seq_len", ""},
    {"max_seq_len", "model.seq_len", ""},
    {"rms_norm_eps", "model.norm_eps", ""},
    {"layer_norm_eps", "model.norm_eps", ""},
    {"layer_norm_epsilon", "model.norm_eps", ""},
    {"layer_norm_type", "model.norm", ""},
    {"tie_word_embeddings", "model.tie_embeddings", ""},
    {"weight_tying", "model.tie_embeddings", ""},
    {"hidden_act", "model.mlp", "gelu, gelu_tanh, swiglu or geglu"},
    {"activation_function", "model.mlp", "gelu, gelu_tanh, swiglu or geglu"},
    {"initializer_range", "model.init_std", ""},
    {"attn_logit_softcapping", "model.attn_softcap", ""},
    {"final_logit_softcapping", "model.final_softcap", ""},
    {"attention_bias", "model.attn_qkv_bias", "with model.attn_out_bias for the output projection"},
    {"attention_layer_norm", "model.qk_norm", ""},
    {"clip_qkv", "", "normlab does not clip q, k and v; model.qk_norm normalises them"},
    {"multiple_of", "", "set model.d_ff itself"},
    {"attention_dropout", "", no_dropout},
    {"attn_pdrop", "", no_dropout},
    {"resid_pdrop", "", no_dropout},
    {"embd_pdrop", "", no_dropout},
    {"hidden_dropout", "", no_dropout},
    {"residual_dropout", "", no_dropout},
    {"embedding_dropout", "", no_dropout},
    // Hugging Face TrainingArguments, OLMo's trainer
    {"max_steps", "train.steps", ""},
    {"max_duration", "train.steps", ""},
    {"num_train_epochs", "", "a run is train.steps steps of train.batch_size sequences"},
    {"epochs", "", "a run is train.steps steps of train.batch_size sequences"},
    {"per_device_train_batch_size", "train.batch_size", "sequences per rank and micro-batch"},
    {"micro_batch_size", "train.batch_size", "sequences per rank and micro-batch"},
    {"warmup_ratio", "", "the warmup is optim.warmup_steps, in steps"},
    {"t_warmup", "optim.warmup_steps", ""},
    {"lr_scheduler_type", "optim.schedule", ""},
    {"scheduler", "optim.schedule", ""},
    {"max_grad_norm", "optim.grad_clip", ""},
    {"clip_grad_norm", "optim.grad_clip", ""},
    {"adam_beta1", "optim.beta1", ""},
    {"adam_beta2", "optim.beta2", ""},
    {"adam_epsilon", "optim.eps", ""},
    {"logging_steps", "train.log_interval", ""},
    {"eval_steps", "train.eval_interval", ""},
    {"save_steps", "train.checkpoint_interval", ""},
    {"save_total_limit", "train.keep_checkpoints", ""},
    {"label_smoothing_factor", "", "normlab trains on plain cross-entropy (train.z_loss adds a "
                                   "z-loss)"},
};
}  // namespace

std::span<const ForeignKey> foreign_keys() { return foreign_table; }

const ForeignKey* find_foreign_key(std::string_view name) {
  for (const ForeignKey& f : foreign_table)
    if (f.name == name) return &f;
  return nullptr;
}

}  // namespace normlab::keytab
