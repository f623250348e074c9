// Shared test fixtures: the tiny configurations the tests start from and the random fills they
// use, written once. A test states what it changes on top of a fixture, so that the difference is
// what a reader sees.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "normlab/config.h"
#include "normlab/config_file.h"
#include "tensor/rng.h"

namespace normlab::test {

// The tiny model of the gradient checks and of the PyTorch parity tests: V = 32, L = 2, C = 16,
// H = 2 (D = 8), F = 24, seq_len = 8; every other option at its default (pre-norm, LayerNorm,
// RoPE, GELU, tied embeddings).
// Sets a [model] key a component declares (no field: model.attn_sink) as an override does.
inline void set_model_key(ModelConfig& m, std::string_view key, std::string_view value) {
  Config c;
  c.model = m;
  set_key(c, key, value);
  m = c.model;
}

// The value of a [model] key a component declares, as its TOML text ("learned" unquoted).
inline std::string model_key(const ModelConfig& m, const std::string& name) {
  Config c;
  c.model = m;
  const auto v = config_to_json(c)["model"][name];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

inline ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 32;
  m.n_layer = 2;
  m.d_model = 16;
  m.n_head = 2;
  m.d_ff = 24;
  m.seq_len = 8;
  return m;
}

// A tiny training run on the embedded corpus (byte vocabulary): L = 2, C = 32, H = 2, F = 64,
// seq_len = 32, batches of 4, `steps` steps on 2 threads, lr 3e-3 after 5 warmup steps, a log
// record every step, no evaluation and no checkpoints.
inline Config tiny_run(int steps) {
  Config c;
  c.model.n_layer = 2;
  c.model.d_model = 32;
  c.model.n_head = 2;
  c.model.d_ff = 64;
  c.model.seq_len = 32;
  c.train.batch_size = 4;
  c.train.steps = steps;
  c.train.log_interval = 1;
  c.train.eval_interval = 0;
  c.train.checkpoint_interval = 0;
  c.train.threads = 2;
  c.optim.lr = 3e-3;
  c.optim.warmup_steps = 5;
  return c;
}

// x[i] += scale * N(0, 1), in order: moves parameters off their initial values so that gains,
// biases and zero-initialised tensors all matter.
template <class T>
void perturb(std::span<T> x, Rng& rng, double scale) {
  for (auto& v : x) v += static_cast<T>(scale * rng.normal());
}

// n token ids, uniform over [0, vocab).
inline std::vector<int> random_tokens(long n, int vocab, Rng& rng) {
  std::vector<int> ids(n);
  for (auto& t : ids) t = static_cast<int>(rng.below(static_cast<std::uint64_t>(vocab)));
  return ids;
}

// A path normlab_test_<name>_<pid> under the system's temporary directory, removed if present.
inline std::string temp_dir(const std::string& name) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("normlab_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

}  // namespace normlab::test
