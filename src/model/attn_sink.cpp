// The attention sink (model.attn_sink; ops/attention.h has the math): one more term exp(z_h) in
// every softmax denominator of query head h, a virtual key with no value. `one` fixes z = 0
// (softmax+1, Miller 2023); `learned` trains z_h per head from 0 (gpt-oss's `sinks`), declared as
// `blocks.{l}.attn.sink` (H), role attn_sink, and its gradient summed over the batch after the
// backward kernel has left it per (b, h).
#include <array>

#include <fmt/format.h>

#include "config/option_keys.h"
#include "model/attn_component.h"
#include "model/param_table.h"

namespace normlab {

namespace {

// P_ij = exp(s_ij) / (exp(z_h) + sum_j' exp(s_ij')), the sink logit not soft-capped
// (model.attn_softcap applies to the scores q.k only), as in gpt-oss / transformers'
// eager_attention_forward:
//   none:    no sink (plain softmax)
//   one:     z = 0, fixed (softmax+1, Evan Miller 2023, "Attention Is Off By One")
//   learned: z_h a learned logit per query head starting at 0 (gpt-oss's `sinks`)
enum class AttnSink { none, one, learned };

}  // namespace

template <>
struct OptionEnumNames<AttnSink> {
  static std::span<const std::string_view> get() {
    static constexpr std::array<std::string_view, 3> names = {"none", "one", "learned"};
    return names;
  }
};

namespace {

const OptionKey<AttnSink> kSink{in_model, "attn_sink", AttnSink::none, keytab::resume::shapes};

std::string_view to_string(AttnSink v) { return OptionEnumNames<AttnSink>::get()[static_cast<int>(v)]; }

template <class T>
class AttnSinkPart final : public AttnComponent<T> {
 public:
  AttnSinkPart(const ParamTable& table, const ModelConfig& m, int max_batch, bool allocate)
      : learned_(kSink(m) == AttnSink::learned), H_(m.n_head) {
    if (learned_) {
      slot_.assign(m.n_layer, kNoSlot);
      for (const ParamSpec& s : table.specs())
        if (s.role == ParamRole::attn_sink) slot_[s.layer] = s.offset;
      if (allocate) d_bh_.assign(static_cast<long>(max_batch) * H_, T(0));
    } else if (allocate) {
      zero_.assign(H_, T(0));
    }
  }
  void scores(int l, const T* params, ops::AttnScores<T>& s) const override {
    s.sink = learned_ ? params + slot_[l] : zero_.data();
  }
  void grads(int, ops::AttnGrads<T>& g) override {
    if (learned_) g.dsink_bh = d_bh_.data();
  }
  void finish_backward(int l, int B, const std::function<T*(long)>& grad) override {
    if (!learned_) return;
    T* dz = grad(slot_[l]);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H_; ++h) dz[h] += d_bh_[static_cast<long>(b) * H_ + h];
  }

 private:
  bool learned_;
  int H_;
  std::vector<long> slot_;  // per layer: the learned logits' offset
  std::vector<T> zero_;     // (H) model.attn_sink = one's fixed logits
  std::vector<T> d_bh_;     // (B, H) the learned logits' gradient per batch row
};

}  // namespace

AttnComponentRow attn_sink_row() {
  return attn_component_row<AttnSinkPart>(
      "attn_sink", [](const ModelConfig& m) { return kSink(m) != AttnSink::none; },
      [](AttnParams& p, const ModelConfig& m) {
        // One logit per query head, 0 at the start (softmax+1's value).
        if (kSink(m) == AttnSink::learned) p.vec("sink", ParamRole::attn_sink, m.n_head, 0.0);
      },
      [](const ModelConfig& m) {
        return fmt::format("attention sink (model.attn_sink = {}): {} in every softmax "
                           "denominator",
                           to_string(kSink(m)),
                           kSink(m) == AttnSink::one ? "exp(0) (softmax+1)"
                                                        : "exp(z_h), a learned logit per head "
                                                          "from 0,");
      });
}

}  // namespace normlab
