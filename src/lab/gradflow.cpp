#include "lab/gradflow.h"

#include <cmath>

#include <fmt/format.h>

#include "diag/diagnostics.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/data.h"
#include "normlab/trainer.h"
#include "tensor/threading.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "train/run_tokenizer.h"
#include "train/step.h"
#include "normlab/communicator.h"

namespace normlab {

std::string GradflowResult::label() const {
  return fmt::format("{} L={} {}", to_string(placement), n_layer, to_string(init));
}

std::vector<GradflowResult> run_gradflow(const Config& base, const GradflowSettings& s,
                                         const std::function<void(const GradflowResult&)>& on_result) {
  set_thread_count(base.train.threads);
  const RunTokenizer tok = resolve_tokenizer(base, std::string());
  check_vocab(base.model, tok);
  const TokenCorpus corpus = TokenCorpus::from_path(base.data.path, *tok.tok);
  const CorpusSplit split = corpus.split(base.data.val_fraction, base.model.seq_len);
  std::vector<GradflowResult> out;
  const auto single = make_single_process_communicator();
  for (InitKind init : s.inits)
    for (int L : s.depths)
      for (Placement p : s.placements) {
        Config cfg = base;
        cfg.model.placement = p;
        cfg.model.n_layer = L;
        cfg.model.init = init;
        validate(cfg);
        const int B = cfg.train.batch_size, T = cfg.model.seq_len;
        Transformer<float> model(cfg.model, B, T);
        model.init_params(cfg.train.seed);
        BatchSampler sampler(split.train, B, T, sampler_seed(cfg.train));
        const NextBatch next_batch = [&](int* idx, int* tgt) { sampler.next(idx, tgt); };
        TrainStep step(model, *single,
                       {.batch = B, .seq = T, .accum = 1, .z_loss = cfg.train.z_loss,
                        .grad_clip = cfg.optim.grad_clip});
        if (s.train_steps > 0) {
          const auto opt = make_optimizer<float>(model.table(), cfg.optim, cfg.model);
          TrainStep train(model, *single,
                          {.batch = B, .seq = T, .accum = 1, .z_loss = cfg.train.z_loss,
                           .grad_clip = cfg.optim.grad_clip,
                           .attn_maxima = opt->needs_attention_maxima()});
          for (int k = 0; k < s.train_steps; ++k) {
            const StepResult sr = train.run(next_batch);
            opt->update(model.params(), model.grads(), learning_rate(cfg.optim, k, s.train_steps),
                        sr.clip_scale, {sr.attn_max_logit_head});
          }
        }
        GradflowResult r{p, L, init, std::vector<double>(L, 0.0), std::vector<double>(L, 0.0),
                         std::vector<double>(L, 0.0), std::vector<double>(L + 1, 0.0), 0.0};
        for (int b = 0; b < s.batches; ++b) {
          r.final_loss += step.run(next_batch, /*collect_stats=*/true).loss.loss / s.batches;
          const GradNorms g = grad_norms(model.table(), L, model.grads());
          for (int l = 0; l < L; ++l) {
            r.grad_norm_layer[l] += g.block[l] / s.batches;
            r.grad_norm_attn[l] += g.attn[l] / s.batches;
            r.grad_norm_mlp[l] += g.mlp[l] / s.batches;
          }
          const ForwardStats& st = model.stats();
          for (int l = 0; l <= L; ++l) r.hidden_rms[l] += st.resid_rms[2 * l] / s.batches;
        }
        if (on_result) on_result(r);
        out.push_back(std::move(r));
      }
  return out;
}

nlohmann::json gradflow_json(const Config& base, const GradflowSettings& s,
                             const std::vector<GradflowResult>& results) {
  nlohmann::json j;
  j["settings"] = {{"batches", s.batches}, {"train_steps", s.train_steps}, {"base_config", config_to_json(base)}};
  for (const auto& r : results)
    j["results"].push_back({{"placement", to_string(r.placement)},
                            {"n_layer", r.n_layer},
                            {"init", to_string(r.init)},
                            {"label", r.label()},
                            {"grad_norm_layer", r.grad_norm_layer},
                            {"grad_norm_attn", r.grad_norm_attn},
                            {"grad_norm_mlp", r.grad_norm_mlp},
                            {"hidden_rms", r.hidden_rms},
                            {"loss", r.final_loss},
                            {"grad_ratio_last_first", r.grad_norm_layer.back() / r.grad_norm_layer.front()},
                            {"hidden_ratio_last_first", r.hidden_rms.back() / r.hidden_rms[1]}});
  return j;
}

std::string gradflow_table(const std::vector<GradflowResult>& results) {
  std::string t =
      "| init | L | placement | grad norm first | grad norm last | last/first | hidden RMS after "
      "block 1 | hidden RMS after block L | last/first |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : results)
    t += fmt::format("| {} | {} | {} | {:.3e} | {:.3e} | {:.3f} | {:.3f} | {:.3f} | {:.3f} |\n",
                     to_string(r.init), r.n_layer, to_string(r.placement), r.grad_norm_layer.front(),
                     r.grad_norm_layer.back(), r.grad_norm_layer.back() / r.grad_norm_layer.front(),
                     r.hidden_rms[1], r.hidden_rms.back(), r.hidden_rms.back() / r.hidden_rms[1]);
  return t;
}

}  // namespace normlab
