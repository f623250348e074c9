// normlab_bench's model configurations (a, a_dyt, b, c, c_matched, gqa, gqa_mha and the smoke models; see
// docs/benchmarks.md), the process measurements the modes report (peak and current RSS, CPU
// time, medians) and the FLOP count per token that MFU is measured with:
//
// FLOPs per token = 6 * P_matmul + 12 * L * T * C, where P_matmul counts the weights that take
// part in matrix products (every linear layer and the LM head, V x C, tied or not; not the norms
// or the position table) and the second term is the attention (QK^T and PV, forward and
// backward, over the full T x T square as in PaLM's MFU definition, Chowdhery et al. 2022, App. B).
// With grouped-query attention or an explicit head size the projections count at their real
// widths (queries and the output n_head * head_dim, keys and values n_kv_head * head_dim) and C in
// the attention term is the query width n_head * head_dim.
#include <sys/resource.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_internal.h"

namespace normlab::bench {

BenchConfig bench_config(const std::string& name) {
  BenchConfig b;
  b.name = name;
  ModelConfig& m = b.model;
  m.placement = Placement::pre;
  m.norm = NormKind::layernorm;
  m.mlp = MlpKind::gelu_tanh;
  m.pos = PosKind::learned;
  m.tie_embeddings = true;
  if (name == "a" || name == "a_dyt" || name == "c" || name == "c_matched") {
    m.vocab_size = 256;
    m.d_model = 384;
    m.n_layer = 6;
    m.n_head = 6;
    m.d_ff = 1536;
    m.seq_len = 256;
    b.batch = 8;
    b.description =
        "V=256 C=384 L=6 H=6 F=1536 T=256 B=8, pre, layernorm, gelu_tanh, learned pos, tied";
    if (name == "a_dyt") {
      // #37: a with every norm site a DyT (initial alpha 0.8 / 0.2 / 0.2, no bias), the same
      // matrix products: what a norm without row statistics saves in a training step.
      m.norm = NormKind::dyt;
      b.description = "as a, but DyT (gamma tanh(alpha x)) at every norm site";
    }
    if (name == "c" || name == "c_matched") {
      m.placement = Placement::peri;
      m.norm = NormKind::rmsnorm;
      m.qk_norm = QKNormKind::rmsnorm;
      m.qk_norm_scope = QKNormScope::head;
      m.pos = PosKind::rope;
      m.mlp = MlpKind::swiglu;
      m.attn_softcap = 50;
      m.final_softcap = 30;
      b.z_loss = 1e-4;
      b.description =
          "as a, but peri, rmsnorm, qk_norm rmsnorm (head), rope, swiglu, attn cap 50, "
          "final cap 30, z-loss 1e-4";
      if (name == "c_matched") {
        // Shazeer (2020): a GLU feed-forward with 2/3 of the hidden width has the parameters and
        // FLOPs of the ungated one, so that c_matched differs from a only by the techniques.
        m.d_ff = 1024;
        b.description =
            "as c, but SwiGLU hidden F=1024 (2/3 x 1536: the FLOPs and parameters of a's FFN)";
      }
    }
  } else if (name == "b") {
    m.vocab_size = 50257;
    m.d_model = 768;
    m.n_layer = 12;
    m.n_head = 12;
    m.d_ff = 3072;
    m.seq_len = 64;
    b.batch = 4;
    b.description = "GPT-2 small shapes: V=50257 C=768 L=12 H=12 F=3072 T=64 B=4, layout as a";
  } else if (name == "gqa" || name == "gqa_mha" || name == "gqa_smoke") {
    // Llama-shaped (transformers' LlamaConfig defaults: untied head, RMSNorm eps 1e-6, RoPE base
    // 10000, no biases), sized for a 2-core CPU; bench/torch_gqa.py builds the same model as
    // LlamaForCausalLM. gqa: 2 key/value heads shared by 8 query heads (4:1); gqa_mha: the same
    // model with 8 key/value heads (full multi-head attention).
    m.norm = NormKind::rmsnorm;
    m.norm_eps = 1e-6;
    m.mlp = MlpKind::swiglu;
    m.pos = PosKind::rope;
    m.rope_theta = 10000.0;
    m.tie_embeddings = false;
    m.vocab_size = 2048;
    m.d_model = 512;
    m.n_layer = 6;
    m.n_head = 8;
    m.n_kv_head = name == "gqa_mha" ? 8 : 2;
    m.head_dim = 64;
    m.d_ff = 1408;
    m.seq_len = 256;
    b.batch = 4;
    b.description = fmt::format(
        "Llama-shaped: V=2048 C=512 L=6 H=8 KV heads={} head_dim=64 F=1408 T=256 B=4, pre, "
        "rmsnorm (eps 1e-6), swiglu, rope 10000, untied, no biases",
        m.n_kv_head);
    if (name == "gqa_smoke") {
      m.vocab_size = 64;
      m.d_model = 32;
      m.n_layer = 2;
      m.n_head = 4;
      m.n_kv_head = 2;
      m.head_dim = 8;
      m.d_ff = 64;
      m.seq_len = 32;
      b.batch = 2;
      b.description = "gqa_smoke: tiny model with the layout of gqa (4 query heads over 2 KV heads)";
    }
  } else if (name == "smoke") {
    m.vocab_size = 64;
    m.d_model = 32;
    m.n_layer = 2;
    m.n_head = 2;
    m.d_ff = 64;
    m.seq_len = 16;
    m.placement = Placement::peri;
    m.norm = NormKind::rmsnorm;
    m.qk_norm = QKNormKind::rmsnorm;
    m.pos = PosKind::rope;
    m.mlp = MlpKind::swiglu;
    m.attn_softcap = 50;
    m.final_softcap = 30;
    b.batch = 2;
    b.z_loss = 1e-4;
    b.description = "smoke: tiny model with the features of c";
  } else {
    throw std::runtime_error(fmt::format(
        "unknown config '{}' (a, a_dyt, b, c, c_matched, gqa, gqa_mha, smoke or gqa_smoke)", name));
  }
  return b;
}

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

double rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

bool gated(MlpKind m) { return m == MlpKind::swiglu || m == MlpKind::geglu; }

// Weights that take part in matrix products, per the FLOP formula above.
long matmul_params(const ModelConfig& m) {
  const long C = m.d_model, F = m.d_ff, F_in = gated(m.mlp) ? 2 * F : F;
  const long Cq = m.q_width(), Ckv = m.kv_width();
  const long per_layer = (Cq + 2 * Ckv) * C + Cq * C + F_in * C + C * F;
  return m.n_layer * per_layer + static_cast<long>(m.vocab_size) * C;
}

double flops_per_token(const ModelConfig& m) {
  return 6.0 * matmul_params(m) + 12.0 * m.n_layer * m.seq_len * m.q_width();
}

}  // namespace normlab::bench
