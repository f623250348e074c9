// load_matching_weights (train.init_from): parameters with the same name and shape are copied,
// the others keep their initialization, the file's extra tensors are listed, and a shape mismatch
// is refused by name with nothing changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/weights.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

std::string saved(const ModelConfig& m, int seed, const std::string& name) {
  Transformer<float> model(m, 1, m.seq_len);
  model.init_params(seed);
  const std::string dir = test::temp_dir(name);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  save_weights(path, model.table(), model.params().data(), {});
  return path;
}

float value_of(Transformer<float>& model, const std::string& name) {
  const ParamSpec* s = nullptr;
  for (const ParamSpec& p : model.table().specs())
    if (p.name == name) s = &p;
  EXPECT_NE(s, nullptr) << name;
  return s ? model.params()[s->offset] : 0.f;
}

TEST(WeightMatch, RetrofittedQkNormKeepsEverythingElse) {
  const ModelConfig base = test::tiny_model();
  const auto file = SafetensorsFile::open(saved(base, 5, "wm_base"));
  ModelConfig qk = base;
  qk.qk_norm = QKNormKind::rmsnorm;
  Transformer<float> model(qk, 1, qk.seq_len);
  model.init_params(9);
  const WeightMatch w = load_matching_weights(model, file);
  EXPECT_EQ(w.copied.size(), file.tensors().size());
  EXPECT_TRUE(w.dropped.empty());
  ASSERT_EQ(w.initialized.size(), 4u);  // q_norm and k_norm of 2 layers
  for (const auto& n : w.initialized) EXPECT_TRUE(n.find("_norm") != std::string::npos) << n;
  for (const ParamSpec& s : model.table().specs()) {
    const TensorInfo* t = file.find(s.name);
    if (!t) continue;
    std::vector<float> want(s.numel);
    file.read_f32(s.name, want, s.shape);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), model.params().begin() + s.offset)) << s.name;
  }
  EXPECT_EQ(value_of(model, w.initialized[0]), 1.f);  // an RMSNorm gain starts at 1

  // The other way round: the gains are dropped, everything else copied.
  const std::string path = test::temp_dir("wm_qk");
  std::filesystem::create_directories(path);
  save_weights(path + "/model.safetensors", model.table(), model.params().data(), {});
  Transformer<float> plain(base, 1, base.seq_len);
  plain.init_params(1);
  const WeightMatch back =
      load_matching_weights(plain, SafetensorsFile::open(path + "/model.safetensors"));
  EXPECT_EQ(back.dropped, w.initialized);
  EXPECT_TRUE(back.initialized.empty());
}

// Retrofitting σReparam: the weights come over, and gamma, u and v are set afresh from them (not
// left at the values the model's own random weights gave), so the model computes what the plain
// one does.
TEST(WeightMatch, RetrofittedSigmaReparamStartsFromTheLoadedWeights) {
  const ModelConfig base = test::tiny_model();
  const auto file = SafetensorsFile::open(saved(base, 5, "wm_sigma"));
  ModelConfig sr = base;
  sr.sigma_reparam = true;
  Transformer<float> model(sr, 1, sr.seq_len), plain(base, 1, base.seq_len);
  model.init_params(9);
  const float gamma_before = value_of(model, "blocks.0.attn.wo.sigma_gamma");
  const WeightMatch w = load_matching_weights(model, file);
  load_matching_weights(plain, file);
  EXPECT_EQ(w.initialized.size(), 3u * 4 * sr.n_layer);  // gamma, u, v of 4 weights per block
  EXPECT_NE(value_of(model, "blocks.0.attn.wo.sigma_gamma"), gamma_before);
  std::vector<int> idx(sr.seq_len);
  for (int t = 0; t < sr.seq_len; ++t) idx[t] = (7 * t + 3) % sr.vocab_size;
  const double a = model.forward(idx.data(), idx.data(), 1, sr.seq_len, 0.0, false).loss;
  const double b = plain.forward(idx.data(), idx.data(), 1, sr.seq_len, 0.0, false).loss;
  EXPECT_NEAR(a, b, 1e-5);
}

TEST(WeightMatch, AShapeMismatchIsRefusedByNameAndChangesNothing) {
  const ModelConfig base = test::tiny_model();
  const auto file = SafetensorsFile::open(saved(base, 5, "wm_shape"));
  ModelConfig wide = base;
  wide.d_ff = 40;
  Transformer<float> model(wide, 1, wide.seq_len);
  model.init_params(2);
  const std::vector<float> before(model.params().begin(), model.params().end());
  try {
    load_matching_weights(model, file);
    FAIL() << "a d_ff change was accepted";
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("shape differs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("blocks.0.mlp"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[24, 16]"), std::string::npos) << msg;
  }
  EXPECT_TRUE(std::equal(before.begin(), before.end(), model.params().begin()));
}

}  // namespace
}  // namespace normlab
