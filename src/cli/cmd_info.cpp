// `normlab info`: parameter counts, FLOPs per token, memory, and the resolved block plan.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "model/attn_component.h"
#include "model/mup.h"
#include "model/norm_ops.h"
#include "model/param_table.h"
#include "normlab/data.h"
#include "train/run_tokenizer.h"
#include "train/memory.h"
#include "model/summary.h"

namespace normlab::cli {

void add_info(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("info", "Show parameter counts, FLOPs per token, the memory of a "
                                         "training run and the block plan (which norm sits where) "
                                         "of a config");
  auto opts = std::make_shared<ConfigOptions>();
  opts->add_to(cmd);
  cmd->callback([&action, opts] {
    action = [opts] {
      Config cfg = opts->load();
      // As train resolves them: the tokenizer (data.tokenizer, or the one a token file records)
      // and model.vocab_size left at its default.
      const bool named = cfg.data.tokenizer != "bytes" &&
                         (!cfg.data.tokenizer.empty() || token_file_info(cfg.data.path));
      const RunTokenizer t = named ? resolve_tokenizer(cfg, std::string())
                                   : RunTokenizer{std::make_unique<ByteTokenizer>(), {}};
      resolve_vocab_size(cfg.model, t);
      const ModelSummary s = summarize(cfg.model, cfg.train.batch_size);
      const auto& m = cfg.model;
      fmt::print("model: {} layers, d_model {}, {} heads (head_dim {}), d_ff {}, vocab {}, seq_len {}\n",
                 m.n_layer, m.d_model, m.n_head, m.head_size(), m.d_ff, m.vocab_size, m.seq_len);
      if (m.kv_heads() != m.n_head || m.q_width() != m.d_model)
        fmt::print("attention: {} query heads over {} key/value heads{}, query width {}, key/value "
                   "width {}\n",
                   m.n_head, m.kv_heads(), m.kv_heads() == 1 ? " (multi-query)" : "",
                   m.q_width(), m.kv_width());
      if (m.sliding_window > 0) {
        std::string types;
        for (int l = 0; l < m.n_layer; ++l) types += m.layer_sliding(l) ? 's' : 'g';
        fmt::print("layers: {} (s = sliding window of {} keys, g = global){}\n", types,
                   m.sliding_window,
                   m.rope_local_theta > 0
                       ? fmt::format("; sliding layers' RoPE base {}", m.rope_local_theta)
                       : "");
      }
      if (m.rope_scaling != RopeScaling::none)
        fmt::print("RoPE: base {}, scaling {} (factor {}{})\n", m.rope_theta,
                   to_string(m.rope_scaling), m.rope_factor,
                   m.rope_scaling == RopeScaling::llama3
                       ? fmt::format(", low/high freq factors {}/{}, original context {}",
                                     m.rope_low_freq_factor, m.rope_high_freq_factor,
                                     m.rope_original_seq_len)
                       : "");
      if (!m.bias && (m.attn_qkv_bias || m.attn_out_bias || m.mlp_bias))
        fmt::print("biases: q/k/v {}, attention output {}, MLP {}\n", m.has_qkv_bias(),
                   m.has_out_bias(), m.has_mlp_bias());
      if (!t.file.empty()) {
        fmt::print("tokenizer: {} ({}){}\n", t.tok->describe(), t.file,
                   t.tok->vocab_size() > m.vocab_size
                       ? fmt::format(": more tokens than model.vocab_size = {}, train refuses this",
                                     m.vocab_size)
                       : "");
      }
      fmt::print("placement {}  norm {}  qk_norm {}{}  pos {}  mlp {}  caps attn {} final {}\n",
                 to_string(m.placement),
                 m.placement == Placement::ngpt ? "l2 (nGPT's own)" : to_string(m.norm),
                 to_string(m.qk_norm),
                 m.qk_norm == QKNormKind::none
                     ? ""
                     : fmt::format(" ({}, {})", to_string(m.qk_norm_scope), to_string(m.qk_norm_position)),
                 to_string(m.pos), to_string(m.mlp), m.attn_softcap, m.final_softcap);
      const ModelPlan plan = build_plan(m);
      // DyT / Derf: the learnable alpha's starting value at each kind of site the model has.
      const NormTraits res = norm_traits(m.norm);
      // The QK sites: model.qk_norm's, or HybridNorm's q/k/v norms (the plan's qk_kind).
      const NormTraits qkt = plan.has_qk_norm() ? norm_traits(plan.qk_norm_kind) : NormTraits{};
      std::string alpha0;
      if (res.alpha)
        alpha0 = fmt::format("attention sublayer {}, MLP sublayer {}{}", m.dyt_alpha_attn,
                             m.dyt_alpha_mlp,
                             plan.final_norm ? fmt::format(", final {}", m.dyt_alpha_final) : "");
      if (qkt.alpha) alpha0 += fmt::format("{}QK {}", alpha0.empty() ? "" : ", ", m.dyt_alpha_qk);
      if (!alpha0.empty())
        fmt::print("initial alpha (model.dyt_alpha_*): {}{}\n", alpha0,
                   res.shift || qkt.shift ? "; Derf's shift s starts at 0" : "");
      // The residual branch scale (model.residual_scale): its width and starting value, the same
      // in every sublayer.
      if (!plan.blocks.empty() && plan.blocks[0].attn.branch_scale != BranchScale::none &&
          plan.blocks[0].attn.branch_scale != BranchScale::lerp) {
        const SublayerPlan& sp = plan.blocks[0].attn;
        fmt::print("residual branch scale (model.residual_scale = {}): {} per sublayer, starting "
                   "at {}\n",
                   to_string(m.residual_scale),
                   sp.branch_scale == BranchScale::channel ? "one value per channel" : "a scalar",
                   sp.branch_scale_init);
      }
      // Admin (model.init = admin): where omega comes from.
      if (m.init == InitKind::admin && !plan.blocks.empty()) {
        const SublayerPlan& sp = plan.blocks[0].attn;
        fmt::print("Admin shortcut scale (model.init = admin): a learnable omega (d_model) per "
                   "post-norm sublayer, x = N_post(omega (.) x + F(x)), starting {}\n",
                   plan.admin_profile
                       ? std::string("from the profiling pass at initialisation "
                                     "(model.admin_omega = profile)")
                       : fmt::format("at {:.6g} (model.admin_omega = logn)", sp.shortcut_init));
      }
      // HybridNorm (model.placement = hybrid): its q/k/v norms.
      if (m.placement == Placement::hybrid)
        fmt::print("HybridNorm q/k/v norms: {} ({}, {} for q and k){}\n", to_string(plan.qk_norm_kind),
                   to_string(m.qk_norm_scope), to_string(m.qk_norm_position),
                   m.hybrid_first_pre ? "; block 0 Pre-Norm (HybridNorm*, model.hybrid_first_pre)"
                                      : "");
      // Gated attention (model.attn_gate) and the attention components (model/attn_component.h).
      if (m.attn_gate != AttnGate::none)
        fmt::print("attention gate (model.attn_gate = {}): o' = sigmoid(u W_g^T) (.) o before the "
                   "output projection, {}\n",
                   to_string(m.attn_gate),
                   m.attn_gate == AttnGate::head ? "one gate per head" : "one gate per value");
      for (const AttnComponentRow& r : attn_components())
        if (r.on(m)) fmt::print("{}\n", r.describe(m));
      const ParamLayout layout = build_param_table(m, plan);
      // σReparam (model.sigma_reparam): how many weights and row blocks it covers.
      if (!layout.slots.sigma.empty()) {
        std::size_t blocks = 0;
        for (const SigmaSlots& ss : layout.slots.sigma) blocks += ss.rows.size();
        fmt::print("sigma_reparam: W_hat = (gamma / sigma(W)) W on {} block weights ({} row "
                   "blocks: q, k, v and gate, up apart), one power-iteration step per training "
                   "step; gamma starts at sigma(W_0)\n",
                   layout.slots.sigma.size(), blocks);
      }
      for (const std::string& line : describe_mup(m, layout.table)) fmt::print("{}\n", line);
      fmt::print("\nparameters: {:L} total\n", s.params);
      for (const auto& [g, n] : s.params_by_group) fmt::print("  {:<10} {:>12}\n", g, n);
      fmt::print("  matmul     {:>12}  (in matrix products)\n", s.matmul_params);
      fmt::print("\ntraining FLOPs per token: {:.4g}  (6 x matmul params + 12 x keys reached x Cq, per layer)\n",
                 s.train_flops_per_token);
      fmt::print("FLOPs per step (batch {} x {} x accum {}): {:.4g}\n", cfg.train.batch_size,
                 m.seq_len, cfg.train.grad_accum,
                 s.train_flops_per_token * cfg.train.batch_size * m.seq_len * cfg.train.grad_accum);
      const MemoryEstimate mem = estimate_memory(cfg);
      std::string source;
      const long available = available_memory("/proc/meminfo", "/sys/fs/cgroup", &source);
      fmt::print("\nmemory of a training run, per rank (estimate): {}\n{}", format_bytes(mem.total()),
                 describe_memory(mem));
      if (available >= 0)
        fmt::print("  available      {:>12}  ({}){}\n", format_bytes(available), source,
                   mem.total() > available ? ": does NOT fit, train refuses this run" : "");
      // The decoding cache (generate): keys and values of every layer, n_kv_head heads each.
      const long kv_per_token = 2L * m.n_layer * m.kv_width() * static_cast<long>(sizeof(float));
      fmt::print("\nKV cache for generation: {} per token, {} at seq_len {}{}\n",
                 format_bytes(kv_per_token), format_bytes(kv_per_token * m.seq_len), m.seq_len,
                 m.kv_heads() != m.n_head
                     ? fmt::format(" ({}x smaller than with {} key/value heads)",
                                   m.n_head / m.kv_heads(), m.n_head)
                     : "");
      fmt::print("\nblock plan:\n");
      for (const auto& line : s.plan) fmt::print("  {}\n", line);
      fmt::print("  final norm before the LM head: {}\n", s.final_norm ? "yes" : "no");
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
