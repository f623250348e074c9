// Runs normlab on weights and a batch given as safetensors files and writes what the PyTorch
// oracle compares (see tests/reference/README.md for the protocol). Modes: model (the default),
// block (block 0 alone), norm (one norm site alone: tests/py/test_dyt_parity.py).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/norm_ops.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "train/optimizer.h"
#include "train/schedule.h"

using namespace normlab;

namespace {

template <class V>
TensorToWrite rec(const std::string& name, std::vector<std::int64_t> shape, const V& v) {
  return {name, DType::F32, std::move(shape),
          std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(v.data()),
                                        sizeof(float) * v.size())};
}

std::vector<int> read_ids(const SafetensorsFile& f, const char* name, long n) {
  std::vector<std::int64_t> v(n);
  f.read_i64(name, v);
  return {v.begin(), v.end()};
}

int run(int argc, char** argv) {
  std::string cfg_path, weights_path, batch_path, out_path, mode = "model";
  int adam_steps = 0, head_chunk = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") cfg_path = v;
    else if (k == "--weights") weights_path = v;
    else if (k == "--batch") batch_path = v;
    else if (k == "--out") out_path = v;
    else if (k == "--adam-steps") adam_steps = std::stoi(v);
    else if (k == "--mode") mode = v;
    else if (k == "--head-chunk") head_chunk = std::stoi(v);
    else throw Error("unknown option " + k);
  }
  const Config cfg = load_config(cfg_path);
  const auto batch = SafetensorsFile::open(batch_path);
  const auto weights = SafetensorsFile::open(weights_path);
  const int C = cfg.model.d_model, V = cfg.model.vocab_size;

  std::vector<TensorToWrite> out;
  std::vector<std::vector<float>> keep;  // storage behind the records
  keep.reserve(64);

  if (mode == "norm") {
    // One norm site of kind model.norm over the rows of x (N, C): y, dx = d sum(y * dy) / dx and
    // the gradients of the parameters the kind has (norm.weight, .bias with model.norm_bias,
    // .alpha, .shift), through the model's own table of norm operations (model/norm_ops.h).
    const TensorInfo* xi = batch.find("x");
    if (!xi || xi->shape.size() != 2) throw Error("batch needs x (N, C)");
    const int N = static_cast<int>(xi->shape[0]), W = static_cast<int>(xi->shape[1]);
    const NormKind kind = cfg.model.norm;
    const NormTraits t = norm_traits(kind);
    const bool has[4] = {true, t.bias && cfg.model.norm_bias, t.alpha, t.shift};
    const char* names[4] = {"norm.weight", "norm.bias", "norm.alpha", "norm.shift"};
    const long sizes[4] = {W, W, 1, 1};
    std::vector<float> p[4], g[4];
    for (int i = 0; i < 4; ++i)
      if (has[i]) {
        p[i].resize(sizes[i]);
        weights.read_f32(names[i], p[i]);
        g[i].assign(sizes[i], 0.f);
      }
    auto ptr = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
    std::vector<float> x(static_cast<long>(N) * W), dy(x.size()), y(x.size()), dx(x.size()),
        mean(N), rstd(N);
    batch.read_f32("x", x);
    batch.read_f32("dy", dy);
    const NormParams<float> np{ptr(p[0]), ptr(p[1]), ptr(p[2]), ptr(p[3]),
                               static_cast<float>(cfg.model.norm_eps),
                               static_cast<float>(cfg.model.norm_gain_offset)};
    const NormGrads<float> ng{ptr(g[0]), ptr(g[1]), ptr(g[2]), ptr(g[3])};
    const NormOps<float>& op = norm_ops<float>(kind);
    op.forward(y.data(), mean.data(), rstd.data(), x.data(), np, N, W);
    op.backward(dx.data(), ng, dy.data(), x.data(), mean.data(), rstd.data(), np, N, W,
                ops::Accum::overwrite, nullptr);
    out.push_back(rec("y", {N, W}, y));
    out.push_back(rec("dx", {N, W}, dx));
    for (int i = 0; i < 4; ++i)
      if (has[i]) out.push_back(rec(std::string("grad.") + names[i], {sizes[i]}, g[i]));
    write_safetensors(out_path, out);
    return 0;
  }

  if (mode == "block") {
    const TensorInfo* xi = batch.find("x");
    if (!xi || xi->shape.size() != 3) throw Error("batch needs x (B, T, C)");
    const int B = static_cast<int>(xi->shape[0]), T = static_cast<int>(xi->shape[1]);
    Transformer<float> model(cfg.model, B, T);
    load_weights(model, weights);
    std::vector<float> x(static_cast<long>(B) * T * C), dy(x.size()), y(x.size()), dx(x.size());
    batch.read_f32("x", x);
    batch.read_f32("dy", dy);
    model.zero_grad();
    model.block_forward(0, x.data(), y.data(), B, T);
    model.block_backward(0, dy.data(), dx.data());
    keep.push_back(y);
    out.push_back(rec("y", {B, T, C}, keep.back()));
    keep.push_back(dx);
    out.push_back(rec("dx", {B, T, C}, keep.back()));
    for (auto& r : weight_records(model.table(), model.grads().data(), "grad.")) {
      keep.emplace_back(reinterpret_cast<const float*>(r.bytes.data()),
                        reinterpret_cast<const float*>(r.bytes.data()) + r.bytes.size() / 4);
      r.bytes = {reinterpret_cast<const std::uint8_t*>(keep.back().data()), r.bytes.size()};
      out.push_back(r);
    }
    write_safetensors(out_path, out);
    return 0;
  }

  const TensorInfo* ii = batch.find("idx");
  if (!ii || ii->shape.size() != 2) throw Error("batch needs idx (B, T)");
  const int B = static_cast<int>(ii->shape[0]), T = static_cast<int>(ii->shape[1]);
  const long N = static_cast<long>(B) * T;
  const auto idx = read_ids(batch, "idx", N), tgt = read_ids(batch, "targets", N);
  Transformer<float> model(cfg.model, B, T);
  load_weights(model, weights);
  if (head_chunk > 0) model.set_head_chunk(head_chunk);

  std::vector<float> logits(N * V);
  model.forward_logits(idx.data(), B, T, logits.data());
  keep.push_back(logits);
  out.push_back(rec("logits", {B, T, V}, keep.back()));
  model.zero_grad();
  const LossStats st = model.forward(idx.data(), tgt.data(), B, T, cfg.train.z_loss, true);
  model.backward();
  keep.push_back({static_cast<float>(st.loss)});
  out.push_back(rec("loss", {1}, keep.back()));
  keep.push_back({static_cast<float>(st.ce)});
  out.push_back(rec("ce", {1}, keep.back()));
  keep.push_back({static_cast<float>(st.z_loss)});
  out.push_back(rec("z_loss", {1}, keep.back()));
  std::vector<float> grads(model.grads().begin(), model.grads().end());
  for (auto r : weight_records(model.table(), grads.data(), "grad.")) out.push_back(r);

  const auto opt = make_optimizer<float>(model.table(), cfg.optim, cfg.model);
  for (int s = 0; s < adam_steps; ++s) {
    model.update_training_state();  // as TrainStep: σReparam's power step (no-op without it)
    model.zero_grad();
    const LossStats ls = model.forward(idx.data(), tgt.data(), B, T, cfg.train.z_loss, true);
    model.backward();
    // This step's gradients before clipping, so that the oracle can replay the optimizer on them.
    keep.emplace_back(model.grads().begin(), model.grads().end());
    for (auto r : weight_records(model.table(), keep.back().data(),
                                 "grad_step." + std::to_string(s) + "."))
      out.push_back(r);
    const double k = clip_scale(cfg.optim.grad_clip,
                                gradient_norm(model.table(), std::span<const float>(model.grads())));
    opt->update(model.params(), model.grads(), learning_rate(cfg.optim, s, cfg.train.steps), k);
    keep.push_back({static_cast<float>(ls.loss)});
    out.push_back(rec("loss_step." + std::to_string(s), {1}, keep.back()));
  }
  if (adam_steps > 0)
    for (auto r : weight_records(model.table(), model.params().data(), "param_after."))
      out.push_back(r);
  write_safetensors(out_path, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity_driver: %s\n", e.what());
    return 1;
  }
}
