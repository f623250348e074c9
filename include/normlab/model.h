// A model handle: a decoder-only Transformer built from a ModelConfig, with its parameters, the
// loss, the logits and sampling. The engine behind it (src/model) is private; this is what tools,
// notebooks and the Python binding hold. Parameters are float32 and laid out as the parameter
// table says (one contiguous arena, tensors in table order, row-major).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/config.h"

namespace normlab {

// One parameter tensor: its checkpoint name, shape, and a view of its values in the model.
struct ParameterView {
  std::string name;                 // e.g. "blocks.0.attn.wqkv"
  std::vector<std::int64_t> shape;  // row-major
  std::span<float> values;
  bool decayed = false;             // whether AdamW's weight decay applies (optim.decay_embeddings
                                    // aside, which the optimizer decides)
  std::string group;                // embedding, attention, mlp, norm or head (diagnostics groups)
  // How init_params draws it (Model::parameters() only): "normal" (std init_scale), "uniform"
  // (bound init_scale) or "constant" (the value init_scale), before DeepNorm's row scaling.
  std::string init;
  double init_scale = 0;
  // Against μP's base model (model.parametrization = mup): dimensions that are widths (0, 1 or
  // 2), and the width multipliers of the fan-in (last) and fan-out (first) dimensions.
  int width_dims = 0;
  double fan_in_mult = 1, fan_out_mult = 1;
  // μP's shape class (src/model/mup.h): "fixed", "vector-like", "matrix-like" or "readout-like".
  std::string mup_class = "fixed";
};

// Losses of one batch: means over its B * T tokens.
struct BatchLoss {
  double loss = 0;      // ce + z_loss
  double ce = 0;        // cross-entropy (nats per token)
  double z_loss = 0;    // z_alpha * mean(log^2 Z)
  double log_z_mean = 0;
};

struct SamplingSettings {
  int max_new_tokens = 200;
  double temperature = 1.0;  // 0: greedy
  int top_k = 0;             // 0: off
  double top_p = 1.0;        // 1: off
  std::uint64_t seed = 1;
};

class Model {
 public:
  // A model for batches of up to max_batch sequences of up to cfg.seq_len tokens, its
  // parameters initialised from `seed` as cfg.init says. Throws ConfigError for an invalid cfg.
  Model(const ModelConfig& cfg, std::uint64_t seed, int max_batch = 1);
  // Loads a checkpoint: a run directory (its latest checkpoint), a checkpoint folder or a
  // model.safetensors file. Throws FormatError when it is not one.
  static Model load(const std::string& checkpoint, int max_batch = 1);
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const ModelConfig& config() const;
  int max_batch() const;
  long num_params() const;
  // Every parameter tensor, in table order.
  std::vector<ParameterView> parameters();
  // One parameter by name; throws InputError naming it when there is none.
  std::span<float> parameter(std::string_view name);

  // Mean loss of (B, T) next-token targets given (B, T) token ids, row-major, B <= max_batch(),
  // T <= seq_len. Throws InputError for a token outside the vocabulary or a shape out of range.
  BatchLoss loss(std::span<const int> idx, std::span<const int> targets, int B, int T,
                 double z_alpha = 0.0);
  // The loss as loss() gives it, then its gradient with respect to every parameter (of the mean
  // over the B * T tokens), written over the gradient arena (not accumulated). It counts as one
  // training step: with model.sigma_reparam it first advances the power iteration (u, v) once;
  // loss(), logits() and generate() never do.
  BatchLoss loss_and_grads(std::span<const int> idx, std::span<const int> targets, int B, int T,
                           double z_alpha = 0.0);
  // Every parameter's gradient from the last loss_and_grads (zeros before the first), in table
  // order with the shapes of parameters(); the views stay valid as long as the model.
  std::vector<ParameterView> gradients();
  // Writes the parameters to a safetensors file (checkpoint names, float32, the config in the
  // "normlab_config" metadata), atomically.
  void save(const std::string& path) const;
  // Reads the parameters from a safetensors file holding exactly this model's tensors (save()'s
  // output, a checkpoint's model.safetensors). All-or-nothing: throws FormatError naming every
  // missing, unexpected or mis-shaped tensor.
  void load_weights(const std::string& path);
  // Logits (B, T, V) after the final soft-cap.
  std::vector<float> logits(std::span<const int> idx, int B, int T);
  // Feeds the prompt, then samples max_new_tokens with the KV cache, calling on_token (if given)
  // for each new token; past seq_len each next token comes from a sliding window over the last
  // seq_len tokens, at positions 0 .. seq_len-1. Returns the new tokens.
  std::vector<int> generate(const std::vector<int>& prompt, const SamplingSettings& s,
                            const std::function<void(int)>& on_token = {});

  struct Impl;  // the engine; src/model/model_impl.h
  Impl& impl() { return *impl_; }

 private:
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace normlab
