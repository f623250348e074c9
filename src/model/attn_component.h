// A model option that works inside the attention softmax (the attention sink): one component per
// option, in its own file, that owns what the option adds around the kernels of ops/attention.h:
// its parameters (declared into the table per layer, found again by role), its fields of the score
// rule (ops::AttnScores) and of the gradient outputs (ops::AttnGrads), its scratch, the summing of
// its gradients after the backward kernel, and its line in `normlab info`. The Transformer runs
// every component the config turns on and names none; the registry (attn_components.cpp) lists
// them, one row each. The math itself stays in the kernels, which know nothing of configs.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "model/params.h"
#include "normlab/config.h"
#include "ops/attention.h"

namespace normlab {

// What a component declares: vectors of layer l's attention, named `blocks.{l}.attn.<part>`, in
// the attention group (param_table.cpp's builder is behind it, so the table's order and
// conventions hold).
class AttnParams {
 public:
  virtual ~AttnParams() = default;
  // A vector of n values starting at `value`, not decayed, not a bias.
  virtual long vec(std::string_view part, ParamRole role, std::int64_t n, double value) = 0;
};

template <class T>
class AttnComponent {
 public:
  virtual ~AttnComponent() = default;
  // Its fields of layer l's score rule, read from the parameters.
  virtual void scores(int l, const T* params, ops::AttnScores<T>& s) const = 0;
  // Its outputs of layer l's tiled backward, set before the kernel runs.
  virtual void grads(int /*l*/, ops::AttnGrads<T>& /*g*/) {}
  // After layer l's backward kernel over a batch of B rows: its parameters' gradients added to
  // `grad(offset)`, the gradient of the parameter at that arena offset (zeroed on first touch).
  virtual void finish_backward(int /*l*/, int /*B*/, const std::function<T*(long)>& /*grad*/) {}
};

// One component: whether the config turns it on, its parameters for one layer, its instance for a
// model whose table is `table` and whose batches hold up to max_batch rows (nothing allocated
// when !allocate: a model sized only), and its line in `normlab info`.
struct AttnComponentRow {
  std::string_view name;
  std::function<bool(const ModelConfig&)> on;
  std::function<void(AttnParams&, const ModelConfig&)> declare;
  std::function<std::unique_ptr<AttnComponent<float>>(const ParamTable&, const ModelConfig&, int,
                                                      bool)>
      make_f;
  std::function<std::unique_ptr<AttnComponent<double>>(const ParamTable&, const ModelConfig&, int,
                                                       bool)>
      make_d;
  std::function<std::string(const ModelConfig&)> describe;
};

// Every component, in the order their parameters are declared and their fields set.
std::span<const AttnComponentRow> attn_components();

// The components the config turns on, made for a model of type T.
template <class T>
std::vector<std::unique_ptr<AttnComponent<T>>> make_attn_components(const ParamTable& table,
                                                                    const ModelConfig& cfg,
                                                                    int max_batch, bool allocate) {
  std::vector<std::unique_ptr<AttnComponent<T>>> out;
  for (const AttnComponentRow& r : attn_components()) {
    if (!r.on(cfg)) continue;
    if constexpr (std::is_same_v<T, float>) out.push_back(r.make_f(table, cfg, max_batch, allocate));
    else out.push_back(r.make_d(table, cfg, max_batch, allocate));
  }
  return out;
}

// A row for component class C<T> (constructed from (table, cfg, max_batch, allocate)).
template <template <class> class C>
AttnComponentRow attn_component_row(std::string_view name, std::function<bool(const ModelConfig&)> on,
                                    std::function<void(AttnParams&, const ModelConfig&)> declare,
                                    std::function<std::string(const ModelConfig&)> describe) {
  return {name,
          std::move(on),
          std::move(declare),
          [](const ParamTable& t, const ModelConfig& c, int b, bool a) {
            return std::unique_ptr<AttnComponent<float>>(std::make_unique<C<float>>(t, c, b, a));
          },
          [](const ParamTable& t, const ModelConfig& c, int b, bool a) {
            return std::unique_ptr<AttnComponent<double>>(std::make_unique<C<double>>(t, c, b, a));
          },
          std::move(describe)};
}

}  // namespace normlab
