// AdamW's decay mask: which parameters decoupled weight decay touches (README, optim): the linear
// weights and an untied lm_head always; the token and position embeddings iff
// optim.decay_embeddings (a tied tok_emb.weight is an embedding); norm gains and biases (of norms
// and of linear layers) never. Checked through what a step does, not through the table's flags:
// with zero gradients and zero moments Adam's step is 0 / (0 + eps) = 0, so a step multiplies a
// decayed parameter by (1 - lr wd) and leaves every other one exactly as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "tensor/rng.h"
#include "train/optimizer.h"
#include "train/optimizers/adamw.h"

namespace normlab {
namespace {

enum class Kind { linear_weight, embedding, norm_gain, bias };

// The class of a parameter from its checkpoint name alone.
Kind kind_of(const std::string& name) {
  const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
  if (name.find("norm") != std::string::npos) return bias ? Kind::bias : Kind::norm_gain;
  if (bias) return Kind::bias;
  if (name == "tok_emb.weight" || name == "pos_emb.weight") return Kind::embedding;
  return Kind::linear_weight;
}

ModelConfig every_kind_of_parameter(Placement placement, bool tied) {
  ModelConfig m;
  m.vocab_size = 11;
  m.n_layer = 2;
  m.d_model = 8;
  m.n_head = 2;
  m.d_ff = 12;
  m.seq_len = 4;
  m.placement = placement;
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  m.qk_norm = QKNormKind::layernorm;
  m.pos = PosKind::learned;
  m.bias = true;
  m.tie_embeddings = tied;
  return m;
}

TEST(AdamWDecay, MaskFollowsTheParameterKinds) {
  for (Placement placement : {Placement::pre, Placement::post, Placement::peri})
    for (bool tied : {false, true})
      for (bool decay_embeddings : {false, true}) {
        const ModelConfig mc = every_kind_of_parameter(placement, tied);
        Transformer<double> model(mc, 1, mc.seq_len);
        Rng rng(5);
        for (double& p : model.params()) p = 0.5 + rng.normal();  // non-zero biases too
        const std::vector<double> before(model.params().begin(), model.params().end());
        model.zero_grad();
        OptimConfig oc;
        oc.weight_decay = 0.5;
        oc.decay_embeddings = decay_embeddings;
        const double lr = 0.1;
        AdamW<double> opt(model.table(), oc);
        opt.update(model.params(), model.grads(), lr);

        const double keep = 1.0 - lr * oc.weight_decay;
        int seen[4] = {};
        for (const ParamSpec& s : model.table().specs()) {
          const Kind k = kind_of(s.name);
          ++seen[static_cast<int>(k)];
          const bool want = k == Kind::linear_weight || (k == Kind::embedding && decay_embeddings);
          long wrong = 0;
          for (long i = 0; i < s.numel; ++i) {
            const double b = before[s.offset + i], a = model.params()[s.offset + i];
            if (!(want ? std::fabs(a - b * keep) <= 1e-15 * std::fabs(b) : a == b)) ++wrong;
          }
          EXPECT_EQ(wrong, 0) << s.name << (want ? " should be decayed" : " should not be decayed")
                              << " (placement " << static_cast<int>(placement) << ", tied "
                              << tied << ", decay_embeddings " << decay_embeddings << ")";
        }
        // Every kind was there to be checked.
        for (int k = 0; k < 4; ++k) EXPECT_GT(seen[k], 0) << "no parameter of kind " << k;
      }
}

}  // namespace
}  // namespace normlab
