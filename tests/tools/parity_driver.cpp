// Runs normlab on weights and a batch given as safetensors files and writes what the PyTorch
// oracle compares (see tests/reference/README.md for the protocol).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "model/weights.h"
#include "model/transformer.h"
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
