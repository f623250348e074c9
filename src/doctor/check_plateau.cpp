// doctor's unigram plateau check: a final train loss near the unigram entropy of the training
// tokens after a real drop, with the remedy normlab's findings 2 and 3 support per placement.
#include <fmt/format.h>

#include <cmath>

#include "doctor/doctor_detail.h"
#include "normlab/config.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

// ---- unigram plateau -----------------------------------------------------------------------
void check_plateau(const Run& r, std::vector<DoctorFinding>& out) {
  const std::optional<double> init = r.initial_loss, fin = r.final_loss, H = r.unigram_entropy;
  if (!H || !fin || !init || !std::isfinite(*fin)) return;
  if (*init - *fin < T::kPlateauDrop) return;  // never got down there: not a plateau
  if (*fin < *H - T::kPlateauBelow || *fin > *H + T::kPlateauAbove) return;
  const Config& c = r.cfg;
  DoctorFinding f;
  f.kind = "unigram_plateau";
  f.severity = "problem";
  f.first_step = r.steps.empty() ? 0 : r.steps.front()->value(metric::step, 0L);
  f.last_step = r.steps.empty() ? 0 : r.steps.back()->value(metric::step, 0L);
  // Where it got onto the plateau: the first logged step within the band.
  for (const json* j : r.steps) {
    const double l = num(*j, metric::loss);
    if (std::isfinite(l) && l <= *H + T::kPlateauAbove) {
      f.first_step = j->value(metric::step, 0L);
      break;
    }
  }
  f.title = fmt::format(
      "stalled at the unigram plateau: final train loss {} vs unigram entropy "
      "{} of the training tokens",
      g(*fin), g(*H));
  f.evidence.push_back(fmt::format(
      "train loss (last 20 steps) {} from {} at step 1; the unigram entropy of the training tokens "
      "is {} nats: the model predicts little more than token frequencies (band {} to {})",
      g(*fin), g(*init), g(*H), g(*H - T::kPlateauBelow), g(*H + T::kPlateauAbove)));
  f.evidence.push_back(
      fmt::format("on it from step {} to the last step {}", f.first_step, f.last_step));
  if (!r.diag.empty()) {
    const auto gb = vec(*r.diag.back(), metric::grad_norm_block);
    if (gb.size() > 1 && gb.back() > 0 && std::isfinite(gb.front()))
      f.evidence.push_back(fmt::format(
          "gradient norm of block 0 {} against block {} {} at step {} (ratio {}){}", g(gb.front()),
          gb.size() - 1, g(gb.back()), r.diag.back()->value(metric::step, 0L),
          g(gb.front() / gb.back()),
          gb.front() / gb.back() < 1e-3 ? ": the lower blocks receive almost no gradient" : ""));
  }
  const std::string f2 = "finding 2 (\"Depth without warmup\")",
                    f3 = "finding 3 (\"Learning-rate "
                         "sweep with and without warmup\")";
  const bool knows_placement = r.knows("model.placement");
  switch (knows_placement ? c.model.placement : Placement::mix) {
    case Placement::post:
    case Placement::deepnorm:
      f.remedies.push_back(config_remedy(
          r,
          fmt::format("change the placement: --set model.placement=pre (or peri). normlab's {}: "
                      "Post-Norm and DeepNorm ended on the unigram plateau (val 2.989) at every "
                      "depth from 6 to 48 layers at lr 2e-3 without warmup, while Pre-Norm "
                      "learned (2.24 at 6 layers); {}: Post-Norm stayed there at all 7 learning "
                      "rates from 3e-4 to 0.3, with warmup 50 or without",
                      f2, f3),
          {{"model.placement", "pre"}}));
      break;
    case Placement::pre:
      f.remedies.push_back(config_remedy(
          r,
          fmt::format("the learning rate and warmup: normlab's {}: Pre-Norm learned best at lr "
                      "3e-3 with warmup 50 (val 2.158; 2.81 at 3e-4, 2.77 at 0.3): --set "
                      "optim.lr=0.003 --set optim.warmup_steps=50; now optim.lr = {}, warmup {}. "
                      "Its {}: deep Pre-Norm (48 layers) ended on the plateau too, so fewer "
                      "layers help",
                      f3, lr_text(r),
                      r.knows("optim.warmup_steps") ? std::to_string(c.optim.warmup_steps)
                                                    : "unknown",
                      f2),
          {{"optim.lr", "0.003"}, {"optim.warmup_steps", "50"}}));
      f.remedies.push_back(config_remedy(
          r,
          "or Peri-Norm (--set model.placement=peri), whose best lr in finding 3 was high (0.095) "
          "and whose sensitivity was the lowest",
          {{"model.placement", "peri"}}));
      break;
    case Placement::peri:
      f.remedies.push_back(config_remedy(
          r,
          fmt::format("the learning rate: normlab's {}: Peri-Norm's best lr was 0.095 (val "
                      "2.36-2.41, with warmup or not): --set optim.lr=0.095; now optim.lr = {}. "
                      "Its {}: Peri-Norm ended on the plateau from 12 layers at lr 2e-3, so fewer "
                      "layers or Pre-Norm help at depth",
                      f3, lr_text(r), f2),
          {{"optim.lr", "0.095"}}));
      break;
    default:
      f.remedies.push_back(advice(
          r, fmt::format("the placement and learning rate: normlab's {} and {}: Pre-Norm (lr "
                         "3e-3, warmup) and Peri-Norm (lr ~0.1) learned where Post-Norm stayed "
                         "on the plateau",
                         f2, f3)));
  }
  f.remedies.push_back(
      advice(r, "or simply more steps: a run this short may not have left the plateau yet"));
  if (!r.torch())
    f.confirm.push_back(fmt::format(
        "normlab sweep --grid model.placement=pre,peri --grid optim.lr=3e-4:0.3:7log: a working "
        "setting ends below {} nats",
        g(*H - T::kPlateauBelow)));
  else
    f.confirm.push_back(fmt::format(
        "rerun with the remedy: the train loss should end below {} nats (the unigram entropy less "
        "{})",
        g(*H - T::kPlateauBelow), g(T::kPlateauBelow)));
  f.values = {{"final_train_loss", *fin}, {"unigram_entropy", *H}, {"initial_loss", *init}};
  // How far the final loss lies above the unigram entropy (within kPlateauAbove: on it).
  f.values["statistic"] =
      statistic("unigram_gap", *fin - *H, T::kPlateauAbove, f.first_step, "at_most");
  out.push_back(std::move(f));
}

}  // namespace normlab::doctor_detail
