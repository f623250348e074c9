// The decoder-only Transformer: forward and hand-written backward over arenas sized once.
//
// Dimensions, declared once: B batch, T sequence, C d_model, H query heads, Hkv key/value heads,
// D head dim (C / H unless model.head_dim), Cq = H D query width, Ckv = Hkv D key/value width,
// F d_ff, V vocab, L layers, N = B * T rows. Activations are row-major (N, C) unless noted.
// Norm placement is interpreted from the ModelPlan (plan.h) by one residual-update routine; the
// parameter table (param_table.h, a function of the config and the plan) is the single list of
// parameters.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "model/param_table.h"
#include "model/plan.h"
#include "normlab/config.h"
#include "ops/accum.h"
#include "tensor/gemm_bf16.h"

namespace normlab {

namespace ops {
template <class T>
struct AttnScores;  // ops/attention.h
}  // namespace ops
template <class T>
class AttnComponent;  // model/attn_component.h

struct LossStats {
  double loss = 0;      // ce + z_loss
  double ce = 0;        // mean cross-entropy
  double z_loss = 0;    // z_alpha * mean(lse^2)
  double lse_mean = 0;  // mean log Z
  long tokens = 0;
};

// Internal statistics of the last forward pass, gathered only while enabled (diagnostics); when
// off, the forward pass does no extra work.
struct ForwardStats {
  std::vector<double> resid_rms, resid_max;  // 2L+1 boundaries: embedding, then after each sublayer
  std::vector<double> branch_rms;            // 2L: each sublayer's branch output f (before N_out)
  std::vector<double> attn_max_logit;        // per layer: max |s| before the soft-cap
  std::vector<double> attn_max_logit_head;   // per layer and head (L * H)
  std::vector<double> attn_entropy;          // per layer: mean entropy of the attention rows (nats)
  // Per layer, with model.attn_gate: the RMS of the gate's pre-activation (its logits, after μP's
  // readout-like multiplier, before the sigmoid); empty without a gate.
  std::vector<double> gate_logit_rms;
  // Per layer, means over batch, heads and query rows: the probability on key position 0 (rows
  // 1 .. T-1; row 0 has nothing else to attend to), and a sink's (model.attn_sink; empty without
  // a sink).
  std::vector<double> attn_first_mass, attn_sink_mass;
  double log_z_mean = 0, log_z_std = 0, log_z_max = 0;
  double max_logit = 0;                      // max |logit| after the final soft-cap
  double max_logit_raw = 0;                  // max |logit| before it
  double logits_rms = 0;                     // RMS of the logits before the final soft-cap
  // Per parameter-table entry (table order): at a DyT/Derf site's `.alpha`, the fraction of the
  // site's inputs in the saturated range (ops::dyt_saturated_fraction); NaN elsewhere.
  std::vector<double> norm_saturated;
};

// The LM head computes the (N, V) logits (and their gradient) a chunk of rows at a time: at most
// kHeadChunkValues values (2^24, 64 MiB in float) but at least kHeadChunkMinRows rows per chunk,
// so that the (V, C) head matrix is streamed through as few times as the memory bound allows.
inline constexpr long kHeadChunkValues = 1L << 24;
inline constexpr long kHeadChunkMinRows = 64;
// Rows per head chunk for a pass over N rows with vocabulary V.
inline int head_chunk_rows(long N, int V) {
  return static_cast<int>(
      std::min<long>(N, std::max<long>(kHeadChunkMinRows, kHeadChunkValues / V)));
}

template <class T>
class Transformer {
 public:
  static constexpr long kNone = kNoSlot;
  // Arena offsets of the weights, from the parameter table (param_table.h).
  using NormSlots = normlab::NormSlots;
  using SublayerSlots = normlab::SublayerSlots;
  using AttnSlots = normlab::AttnSlots;
  using MlpSlots = normlab::MlpSlots;
  using BlockSlots = normlab::BlockSlots;

  // Allocates parameters, gradients and activations for batches of up to max_batch x max_seq.
  // With allocate = false only the sizes are computed; nothing may run (use
  // activation_elements(cfg, ...) rather than such an object).
  Transformer(const ModelConfig& cfg, int max_batch, int max_seq, bool allocate = true);
  ~Transformer();  // out of line: the attention components are complete only in transformer.cpp
  // Elements of the activation arena (activations, backward scratch, head chunk buffers).
  long activation_elements() const { return arena_used_; }
  // The same for a model of config `cfg`, without allocating anything (`normlab info`).
  static long activation_elements(const ModelConfig& cfg, int max_batch, int max_seq) {
    return Transformer(cfg, max_batch, max_seq, /*allocate=*/false).activation_elements();
  }

  const ModelConfig& config() const { return cfg_; }
  const ModelPlan& plan() const { return plan_; }
  const ParamTable& table() const { return table_; }
  std::span<T> params() { return params_; }
  // The gradients (zero after zero_grad() for every parameter no backward has reached since).
  std::span<T> grads() {
    settle_grads();
    return grads_;
  }
  std::span<const T> params() const { return params_; }
  std::span<const T> grads() const {
    settle_grads();
    return grads_;
  }
  T* param(const ParamSpec& s) { return params_.data() + s.offset; }
  T* grad(const ParamSpec& s) {
    settle_grads();
    return grads_.data() + s.offset;
  }
  int max_batch() const { return maxB_; }
  int max_seq() const { return maxT_; }

  // Seeded initialisation following cfg.init (see tests/reference/README.md), then
  // init_sigma_reparam(). With model.init = admin and admin_omega = profile it ends with
  // admin_profile on a batch of max_batch x max_seq token ids drawn uniformly from the vocabulary
  // by the same seed (at initialisation every embedding row is an independent draw, so text would
  // change only which rows repeat).
  void init_params(std::uint64_t seed);
  // Admin's profiling pass (sublayer.cpp): one forward pass over idx (B, T) that sets every
  // `res_omega` in order, omega_1 = 1, omega_{k+1} = sqrt(Var[omega_k x_k] + Var[F_k(x_k)]).
  void admin_profile(const int* idx, int B, int Tn);

  // σReparam (model.sigma_reparam; ops/sigma_reparam.h, model/sigma_reparam.cpp). Every forward
  // pass uses W_hat = (gamma / sigma) W with sigma = u^T W v from the current W, u and v, which no
  // forward pass changes (evaluation and generation included). Training calls
  // update_training_state() once per optimizer step, before the step's first forward pass (not
  // per micro-batch): one power-iteration step on every weight's u and v. Both are no-ops for a
  // model without σReparam.
  void update_training_state();
  // u and v of every σReparam weight set to W's top singular vectors (power iteration to
  // convergence, as the reference starts from an SVD) and gamma to sigma(W), so that W_hat = W.
  void init_sigma_reparam();
  const std::vector<SigmaSlots>& sigma_sites() const { return sigma_; }
  // Sets every gradient to zero. Lazily: a parameter's gradient is zero-filled when something
  // first accumulates into it or reads grads(), and its first matrix product overwrites it
  // instead (no fill, and the product does not read it), as PyTorch's set_to_none does.
  void zero_grad();

  // Forward pass with the loss. With need_grad, the head and the loss are differentiated on the
  // fly, chunk by chunk (the (N, V) logits are never materialised), scaled by grad_scale / N and
  // accumulated into grads(); call backward() afterwards for the body.
  // idx, targets: (B, T) token ids; throws InputError when one is outside the vocabulary.
  LossStats forward(const int* idx, const int* targets, int B, int Tn, double z_alpha,
                    bool need_grad, double grad_scale = 1.0);
  void backward();
  // Forward pass that writes all logits (B, T, V), after the final soft-cap.
  void forward_logits(const int* idx, int B, int Tn, T* logits);

  // One block on its own (parity with torch.nn.TransformerEncoderLayer): y = block_l(x),
  // then dx = d(sum(y * dy))/dx with parameter gradients accumulated. x, y, dy, dx: (B, T, C).
  void block_forward(int l, const T* x, T* y, int B, int Tn);
  void block_backward(int l, const T* dy, T* dx);

  void set_collect_stats(bool on) { collect_stats_ = on; }
  // Gathers only stats().attn_max_logit_head (and attn_max_logit) in the forward passes, for
  // QK-Clip on every step; the rest of ForwardStats only with set_collect_stats.
  void set_collect_attn_max(bool on) { collect_attn_max_ = on; }

  // Rows per LM-head chunk: head_chunk_rows(max_batch * max_seq, V) unless set smaller. The
  // setter exists for tests of the multi-chunk path on small models: 1 <= rows <= the size chosen
  // at construction (the chunk buffers are not resized); throws InternalError otherwise.
  int head_chunk() const { return head_chunk_; }
  void set_head_chunk(int rows);

  // Product used by every linear layer and the LM head, forward and backward (dx and dW):
  // float32 (the default) or bf16 inputs with fp32 accumulation (gemm_bf16.h). Parameters,
  // gradients, activations and attention stay in T. Float models only: a double model throws
  // InputError for bf16 (it exists for gradient checks, where bf16 would defeat the purpose).
  void set_matmul_precision(GemmPrecision prec);
  GemmPrecision matmul_precision() const { return mm_; }
  // The LM head's products only (forward, dx, dW, generation), after set_matmul_precision, which
  // sets both: e.g. bf16 blocks with a float32 head.
  void set_head_matmul_precision(GemmPrecision prec);
  GemmPrecision head_matmul_precision() const { return mm_head_; }
  const ForwardStats& stats() const { return stats_; }

  // Incremental decoding with a key/value cache (batch 1): appends `n` tokens at positions
  // cache.len .. cache.len + n - 1 and writes the logits of the last one (V), after the final cap.
  struct KvCache {
    int len = 0;
    std::vector<T> k, v;  // per layer (seq_len, Ckv), concatenated
    std::vector<T> scratch;
  };
  KvCache make_cache() const;
  void forward_cached(const int* idx, int n, KvCache& cache, T* last_logits);

 private:
  struct NormCache {
    T* out = nullptr;
    T* mean = nullptr;
    T* rstd = nullptr;
  };
  struct SublayerActs {
    NormCache in, out, post;  // norm_in -> u, norm_out -> g, norm_post -> y (its input is s)
    T* f = nullptr;           // branch output (N, C)
    T* s = nullptr;           // alpha x + g, when normalised after the add (N, C)
  };
  struct AttnActs {
    SublayerActs res;
    T* qkv = nullptr;         // (N, Cq + 2 Ckv): q, k, v are read in place (row stride Cq+2Ckv)
    T* qs[4] = {};            // with QK stages only: qs[0] raw copy, qs[n_stages] final (N, Cq)
    T* ks[4] = {};            // (N, Ckv)
    NormCache qn, kn;         // QK-norm statistics (rows N*H / N*Hkv per head, or N)
    T* v_raw = nullptr;       // HybridNorm (norm_qkv): the values gathered (N, Ckv) ...
    NormCache vn;             // ... and normalised (out (N, Ckv); rows N*Hkv per head, or N)
    T* lse = nullptr;         // (B, H, T) softmax log-sum-exp; the backward recomputes P from it
    T* o = nullptr;           // (N, Cq) heads merged
    T* gate = nullptr;        // with model.attn_gate: (N, H) or (N, Cq) sigmoid gates
    T* og = nullptr;          // with model.attn_gate: (N, Cq) gate (.) o, wo's input
  };
  // Queries and keys as the attention reads them: views into qkv, or the last QK-stage buffers.
  struct QkView {
    const T *q, *k;
    int ldq, ldk;
  };
  // The RoPE tables of layer l (global, or the sliding layers' own).
  const T* rope_cos(int l) const { return layers_[l].local_rope ? rope_cos_local_ : rope_cos_; }
  const T* rope_sin(int l) const { return layers_[l].local_rope ? rope_sin_local_ : rope_sin_; }
  struct MlpActs {
    SublayerActs res;
    T* h = nullptr;           // (N, F) or (N, 2F)
    T* hs = nullptr;          // nGPT: (N, 2F) h with s_v sqrt(C) and s_u applied
    T* a = nullptr;           // (N, F)
  };

  T* p(long off) { return off == kNone ? nullptr : params_.data() + off; }
  // A linear layer's weight as the products read it: W_hat under σReparam, else the parameter.
  const T* weight(long off);
  // Where a linear layer's backward writes the weight gradient and how (linear_backward's dw and
  // dw_accum): the gradient itself, or under σReparam dL/dW_hat into scratch, which
  // finish_weight_grad(off) then turns into dW and dgamma.
  struct WeightGrad {
    T* dw;
    ops::Accum accum;
  };
  WeightGrad weight_grad(long off);
  void finish_weight_grad(long off);
  // sigma and W_hat of every σReparam weight from the current W, u, v (start of a forward pass).
  void sigma_refresh();
  int sigma_site(long off) const;  // index into sigma_ of the weight at offset off, or -1
  // Gradient of the parameter at arena offset off, for accumulation: zero-filled first if
  // zero_grad() left it unfilled.
  T* g(long off);
  // The same without the fill, for a product that writes all of it: grad_accum(off) says how
  // (Accum::overwrite for the first contribution after zero_grad(), then Accum::add).
  T* g_raw(long off) { return off == kNone ? nullptr : grads_.data() + off; }
  ops::Accum grad_accum(long off);
  // Zero-fills every gradient still unfilled.
  void settle_grads() const;
  T* alloc(long n);
  // Arena layout, run twice by the constructor (count, then assign); see transformer.cpp.
  void layout_activations(long N);
  void alloc_sublayer(SublayerActs& a, const SublayerPlan& pl, long N);
  void layout_backward_scratch(long N);
  void alloc_norm(NormCache& c, bool present, long rows, int width);

  void embed(const int* idx, int B, int Tn);
  void body_forward(int l_begin, int l_end);
  void sublayer_forward(const SublayerPlan& pl, const SublayerSlots& sl, SublayerActs& a,
                        const T* x, T* y, bool attn, int l);
  void sublayer_backward(const SublayerPlan& pl, const SublayerSlots& sl, SublayerActs& a,
                         const T* x, const T* dy, T* dx, bool attn, int l);
  // Branch backward: du (+)= d branch / du (ops::Accum::add adds into du, ::overwrite replaces).
  void attn_forward(int l, const T* u, T* f);
  void attn_backward(int l, const T* u, const T* df, T* du, ops::Accum du_accum);
  QkView qk_view(int l) const;
  // What layer l's attention kernels do to the scores (ops/attention.h): the scale, the soft-cap,
  // the layer's window, then each attention component's fields (model/attn_component.h: the
  // sink's logits). The one place that maps the attention options of the config and plan onto
  // the kernels' arguments.
  ops::AttnScores<T> attn_scores(int l) const;
  // Gated attention (model.attn_gate): gate values per head, 1 or D; 0 without a gate.
  int gate_width() const;
  // The multiplier on the gate logits u W_g^T: μP's readout-like 1/m_fan_in for a per-head gate
  // at a fixed number of heads (model/mup.h), else 1. From W_g's row of the parameter table.
  T gate_mult_ = T(1);
  void mlp_forward(int l, const T* u, T* f);
  void mlp_backward(int l, const T* u, const T* df, T* du, ops::Accum du_accum);
  // A norm site, run by the operations of its kind (s.kind, model/norm_ops.h).
  void norm_forward(NormCache& c, const NormSlots& s, const T* x, long rows, int width);
  // dx (+)= through the norm (ops::Accum::add adds into dx, ::overwrite replaces it); with base
  // (Accum::add), dx = base + through the norm.
  void norm_backward(const NormCache& c, const NormSlots& s, const T* x, const T* dout, T* dx,
                     long rows, int width, ops::Accum accum, const T* base = nullptr);
  void check_tokens(const int* ids, long n, const char* what) const;
  // One step of admin_profile: sets the omega at `omega` to the running ratio, then updates it
  // from the variances of omega x and g (n values each).
  void admin_profile_step(long omega, const T* x, const T* g, long n);
  const T* final_hidden() const;
  // logits (rows, V) = readout_mult * h W_head^T, then the final soft-cap (inference).
  void head_logits(const T* h, long rows, T* logits);

  ModelConfig cfg_;
  ModelPlan plan_;
  ParamTable table_;
  int maxB_, maxT_;
  int B_ = 0, T_ = 0;  // shape of the current forward pass
  std::vector<T> params_;
  mutable std::vector<T> grads_;
  // Per parameter (table order): its gradient is zero by zero_grad() but not yet filled; empty
  // when every gradient is filled.
  mutable std::vector<unsigned char> unfilled_;

  // σReparam: the reparametrized weights (param_table.h), and per weight its W_hat (in the
  // activation arena) and the sigma of each row block as the last refresh computed it.
  std::vector<SigmaSlots> sigma_;
  std::vector<int> sigma_site_;       // per table entry: index into sigma_, or -1
  std::vector<T*> sigma_hat_;         // per weight: W_hat (O, I)
  std::vector<int> sigma_val_off_;    // per weight: its first row block in sigma_val_
  std::vector<double> sigma_val_;     // per row block: sigma = u^T W v
  T* sigma_dw_hat_ = nullptr;         // scratch: dL/dW_hat of one weight (the largest O x I)
  long tok_emb_ = kNone, pos_emb_ = kNone, lm_head_ = kNone, s_z_ = kNone;
  NormSlots final_norm_;
  std::vector<BlockSlots> blocks_;
  // Per layer, from the config once: the attention window (0 = global) and whether the layer
  // uses the sliding layers' own RoPE tables.
  struct LayerAttn {
    int window = 0;
    bool local_rope = false;
  };
  std::vector<LayerAttn> layers_;
  std::vector<QkStage> qk_stages_;  // plan_.qk_stages

  // Activation arena and views into it.
  std::vector<T> arena_;
  long arena_used_ = 0;
  std::vector<T*> res_;              // 2L+1 residual states (N, C)
  std::vector<AttnActs> attn_acts_;
  std::vector<MlpActs> mlp_acts_;
  NormCache final_cache_;            // final norm output (N, C)
  T* rope_cos_ = nullptr;            // (seq_len, D/2): global layers (rope_theta, rope_scaling)
  T* rope_sin_ = nullptr;
  T* rope_cos_local_ = nullptr;      // (seq_len, D/2): sliding layers with rope_local_theta > 0
  T* rope_sin_local_ = nullptr;
  // Backward scratch, reused by every layer.
  // Gradients are named after the value they are taken with respect to (dL/d value); N = B * T.
  T* d_resid_a_ = nullptr;      // (N, C) residual stream, two buffers swapped block by block
  T* d_resid_b_ = nullptr;      // (N, C)   (and the stream between a block's two sublayers)
  T* d_post_in_ = nullptr;      // (N, C) s, the input of the norm after the add (post-norm)
  T* d_branch_out_ = nullptr;   // (N, C) f, the branch output before N_out
  T* d_branch_in_ = nullptr;    // (N, C) u, the branch input after N_in
  T* d_qkv_ = nullptr;          // (N, Cq + 2 Ckv) the fused q, k, v projection
  T* d_q_ = nullptr;            // (N, Cq) queries / keys after the QK stages (contiguous)
  T* d_k_ = nullptr;            // (N, Ckv)
  T* d_heads_ = nullptr;        // (N, Cq) o, the attention heads merged (gated: gate (.) o)
  T* d_ungated_ = nullptr;      // (N, Cq) with a gate: o before the gate
  T* d_gate_ = nullptr;         // (N, H G) with a gate: the gate logits u W_g^T
  T* d_qk_stage_a_ = nullptr;   // (N, Cq) between QK stages (QK-norm, RoPE), when there are any
  T* d_qk_stage_b_ = nullptr;   // (N, Cq) with two stages
  T* d_v_ = nullptr;            // (N, Ckv) normalised values (HybridNorm's v_norm), when any
  T* d_v_raw_ = nullptr;        // (N, Ckv) the values before their norm
  T* d_mlp_h_ = nullptr;        // (N, F) or (N, 2F) gated: the MLP's first projection
  T* d_mlp_act_ = nullptr;      // (N, F) the activation (or gated unit) output
  T* d_final_;                       // gradient at the final hidden state (N, C)
  T* head_logits_;                   // (chunk, V)
  T* head_dlogits_;                  // (chunk, V), only with a final cap (else in place)
  T* head_lse_;                      // (chunk)
  T* head_raw_ = nullptr;            // (chunk, V) nGPT: the logits before s_z
  int head_chunk_ = 0;               // rows per chunk in use
  int head_chunk_alloc_ = 0;         // rows the chunk buffers hold
  const int* idx_ = nullptr;
  bool head_grad_done_ = false;
  bool collect_stats_ = false;
  bool collect_attn_max_ = false;
  bool admin_profiling_ = false;  // inside admin_profile
  double admin_ratio_ = 1.0;      // its running omega
  GemmPrecision mm_ = GemmPrecision::float32;       // linear layers
  GemmPrecision mm_head_ = GemmPrecision::float32;  // LM head
  ForwardStats stats_;
  std::vector<T> attn_stat_max_, attn_stat_ent_;  // (L, B*H), used only while collecting
  std::vector<T> attn_stat_first_, attn_stat_sink_;  // (L, B*H), likewise
  // The attention components the config turns on (model/attn_component.h), with their scratch.
  std::vector<std::unique_ptr<AttnComponent<T>>> attn_parts_;
  KvCache* kv_ = nullptr;  // set during forward_cached
  int pos0_ = 0;           // absolute position of the first row of the current pass
};

extern template class Transformer<float>;
extern template class Transformer<double>;

}  // namespace normlab
