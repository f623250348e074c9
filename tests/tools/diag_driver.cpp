// normlab's own diagnostics over given batches, for the differential test of normlab.torch.Probe
// (tests/py/test_probe_differential.py):
//   diag_driver --hf DIR --config CFG.toml --batches BATCHES.safetensors --out OUT.jsonl
//               [--replay PREFIX]
// DIR: a Hugging Face model directory (import_hf: the model and its weights); CFG: the optim,
// train and diag sections (its model section is replaced by DIR's). BATCHES holds `idx` and
// `targets`, int64 (S, B, T): one training step per batch s, as the trainer runs it (forward with
// statistics, backward, global gradient norm, clipping, optim.name's optimizer at the schedule's
// learning rate) and one metrics.jsonl-style line per step: step, loss, lr, grad_norm,
// diagnostics_json's fields and (without --replay) second_moment_json's.
// --replay PREFIX: instead of AdamW, step s starts from the weights of the HF directory PREFIX<s>
// and its update ends at PREFIX<s+1> (another trainer's trajectory), so that only the
// measurement is compared. Exits non-zero with a message on stderr for any error.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "diag/diagnostics.h"
#include "interop/hf.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"
#include "normlab/safetensors.h"
#include "train/optimizer.h"
#include "train/schedule.h"

using namespace normlab;

namespace {

int run(int argc, char** argv) {
  std::string hf_dir, cfg_path, batch_path, out_path, replay;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--hf") hf_dir = v;
    else if (k == "--config") cfg_path = v;
    else if (k == "--batches") batch_path = v;
    else if (k == "--out") out_path = v;
    else if (k == "--replay") replay = v;
    else throw Error("unknown option " + k);
  }
  if (hf_dir.empty() || cfg_path.empty() || batch_path.empty() || out_path.empty())
    throw Error("usage: diag_driver --hf DIR --config CFG --batches B --out OUT [--replay P]");
  Config cfg = load_config(cfg_path);
  HfModel hm = import_hf(hf_dir);
  cfg.model = hm.config.model;

  const auto batches = SafetensorsFile::open(batch_path);
  const TensorInfo* ii = batches.find("idx");
  if (!ii || ii->shape.size() != 3) throw Error("batches need idx (S, B, T)");
  const int S = static_cast<int>(ii->shape[0]), B = static_cast<int>(ii->shape[1]),
            T = static_cast<int>(ii->shape[2]);
  const long N = static_cast<long>(B) * T;
  std::vector<std::int64_t> idx64(S * N), tgt64(S * N);
  batches.read_i64("idx", idx64);
  batches.read_i64("targets", tgt64);
  const std::vector<int> idx(idx64.begin(), idx64.end()), tgt(tgt64.begin(), tgt64.end());

  Transformer<float> model(cfg.model, B, T);
  std::copy(hm.params.begin(), hm.params.end(), model.params().begin());
  model.set_collect_stats(true);
  const auto opt = make_optimizer<float>(model.table(), cfg.optim, cfg.model);
  std::vector<float> before(model.params().size());
  std::ofstream out(out_path);
  for (int s = 0; s < S; ++s) {
    if (!replay.empty()) {
      const HfModel w = import_hf(replay + std::to_string(s));
      std::copy(w.params.begin(), w.params.end(), model.params().begin());
    }
    model.zero_grad();
    const LossStats st =
        model.forward(idx.data() + s * N, tgt.data() + s * N, B, T, cfg.train.z_loss, true);
    model.backward();
    const double gn = gradient_norm(model.table(), std::span<const float>(model.grads()));
    const double k = clip_scale(cfg.optim.grad_clip, gn);
    const double lr = learning_rate(cfg.optim, s, cfg.train.steps);
    std::copy(model.params().begin(), model.params().end(), before.begin());
    if (replay.empty()) {
      opt->update(model.params(), model.grads(), lr, k);
    } else {  // the clipped gradients, as the update leaves them, and the other trainer's weights
      for (float& g : model.grads()) g = static_cast<float>(g * k);
      const HfModel w = import_hf(replay + std::to_string(s + 1));
      std::copy(w.params.begin(), w.params.end(), model.params().begin());
    }
    nlohmann::json j = diagnostics_json(model, model.grads(), before, cfg.diag.per_head);
    if (replay.empty())  // as the trainer: the optimizer's RMS(g^2 / v_hat) after its update
      j.update(second_moment_json(model.table(),
                                  opt->second_moment_ratio(std::span<const float>(model.grads()))));
    j[metric::step] = s + 1;
    j[metric::loss] = st.loss;
    j[metric::lr] = lr;
    j[metric::grad_norm] = gn;
    out << j.dump() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "diag_driver: %s\n", e.what());
    return 1;
  }
}
