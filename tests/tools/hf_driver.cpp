// Runs normlab on a Hugging Face model directory (imported with import_hf) or on a normlab
// checkpoint, for tests/py/test_hf_interop.py:
//   hf_driver (--hf DIR | --checkpoint RUN_OR_CKPT) --batch BATCH.safetensors --out OUT.safetensors
//             [--export OUT_DIR]
// BATCH holds `idx` and `targets`, int64 (B, T). OUT holds `logits` (B, T, V), `loss` (shape [1],
// mean cross-entropy) and `grad.<HF name>` for every HF tensor of the family (normlab's gradients
// mapped back to HF's layout: wqkv split into q/k/v, w_in into gate/up, GPT-2's Conv1D transposed);
// its metadata "family" names the family. --export writes the model with export_hf.
// Exits non-zero with a message on stderr for any error.
#include <cstdio>
#include <string>
#include <vector>

#include "interop/hf.h"
#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "train/checkpoint.h"

using namespace normlab;

namespace {

TensorToWrite rec(const std::string& name, std::vector<std::int64_t> shape,
                  const std::vector<float>& v) {
  return {name, DType::F32, std::move(shape),
          std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(v.data()),
                                        sizeof(float) * v.size())};
}

int run(int argc, char** argv) {
  std::string hf_dir, checkpoint, batch_path, out_path, export_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--hf") hf_dir = v;
    else if (k == "--checkpoint") checkpoint = v;
    else if (k == "--batch") batch_path = v;
    else if (k == "--out") out_path = v;
    else if (k == "--export") export_dir = v;
    else throw Error("unknown option " + k);
  }
  if (hf_dir.empty() == checkpoint.empty()) throw Error("give exactly one of --hf, --checkpoint");

  ModelConfig m;
  std::vector<float> params;
  HfFamily family;
  if (!hf_dir.empty()) {
    HfModel hm = import_hf(hf_dir);
    m = hm.config.model;
    params = std::move(hm.params);
    family = hm.family;
    for (const auto& n : hm.notes) std::fprintf(stderr, "hf_driver: note: %s\n", n.c_str());
  } else {
    const std::string dir = resolve_checkpoint(checkpoint);
    m = checkpoint_config(dir).model;
    Transformer<float> tmp(m, 1, 1);
    load_checkpoint(dir, tmp, nullptr, nullptr);
    params.assign(tmp.params().begin(), tmp.params().end());
    family = hf_family_for(m);
  }

  const auto batch = SafetensorsFile::open(batch_path);
  const TensorInfo* ii = batch.find("idx");
  if (!ii || ii->shape.size() != 2) throw Error("batch needs idx (B, T)");
  const int B = static_cast<int>(ii->shape[0]), T = static_cast<int>(ii->shape[1]);
  const long N = static_cast<long>(B) * T;
  std::vector<std::int64_t> idx64(N), tgt64(N);
  batch.read_i64("idx", idx64);
  batch.read_i64("targets", tgt64);
  const std::vector<int> idx(idx64.begin(), idx64.end()), tgt(tgt64.begin(), tgt64.end());

  Transformer<float> model(m, B, T);
  std::copy(params.begin(), params.end(), model.params().begin());
  std::vector<float> logits(N * m.vocab_size);
  model.forward_logits(idx.data(), B, T, logits.data());
  model.zero_grad();
  const LossStats st = model.forward(idx.data(), tgt.data(), B, T, 0.0, true);
  model.backward();

  std::vector<TensorToWrite> out;
  out.push_back(rec("logits", {B, T, m.vocab_size}, logits));
  const std::vector<float> loss{static_cast<float>(st.loss)};
  out.push_back(rec("loss", {1}, loss));
  const auto grads = hf_tensors(family, m, model.table(), model.grads().data());
  for (const HfLink& l : hf_links(family, m))
    out.push_back(rec("grad." + l.hf_name, l.hf_shape, grads.at(l.hf_name)));
  write_safetensors(out_path, out, {{"family", std::string(to_string(family))}});

  if (!export_dir.empty()) export_hf(m, model.table(), model.params().data(), export_dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_driver: %s\n", e.what());
    return 1;
  }
}
