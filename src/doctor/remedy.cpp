// doctor's remedies as data (doctor.h's Remedy): the config changes each one makes, whether the
// run already has them (then it is reported as tried, with what the run shows with it, and never
// advised again), and their wording for where the run came from: `--set` options for normlab's
// own runs, the change to make in one's own code for a PyTorch run written by normlab.torch.
#include <fmt/format.h>

#include <regex>

#include "doctor/doctor_detail.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab::doctor_detail {

namespace {

// What a `--set key=value` means for a PyTorch run, one row per key ({v}: the value). A row with
// a value applies to that value only; the first row that matches wins.
struct TorchWords {
  std::string_view key, value, words;
};
constexpr TorchWords kTorchWords[] = {
    {"optim.lr", "", "set the learning rate of your optimizer (its scheduler's peak) to {v}"},
    {"model.qk_norm", "", "normalize queries and keys per head in your attention (an RMSNorm "
                          "over head_dim on q and on k, before RoPE: QK-Norm)"},
    {"train.z_loss", "", "add the z-loss term `{v} * torch.logsumexp(logits, -1).pow(2).mean()` "
                         "to your loss"},
    {"model.attn_softcap", "", "soft-cap your attention scores: `scores = {v} * torch.tanh(scores "
                               "/ {v})` before the softmax"},
    {"model.final_softcap", "", "soft-cap your output logits: `logits = {v} * torch.tanh(logits / "
                                "{v})`"},
    {"model.placement", "peri", "add a norm on each sublayer's output before the residual add "
                                "(Peri-Norm)"},
    {"model.placement", "pre", "move each norm before its sublayer (Pre-Norm)"},
    {"model.norm", "rmsnorm", "use torch.nn.RMSNorm at these sites"},
    {"model.norm", "layernorm", "use torch.nn.LayerNorm at these sites"},
    {"model.init_std", "", "initialize the weights with std {v} (`torch.nn.init.normal_(w, "
                           "std={v})`)"},
    {"model.embed_init_std", "", "initialize the token embedding (and the output head) with std "
                                 "{v} (`torch.nn.init.normal_(emb.weight, std={v})`)"},
    {"optim.warmup_steps", "", "warm the learning rate up linearly over the first {v} steps (a "
                               "LambdaLR, or transformers' get_*_schedule_with_warmup)"},
    {"optim.grad_clip", "", "clip the gradient norm to {v}: "
                            "`torch.nn.utils.clip_grad_norm_(model.parameters(), {v})` before "
                            "optimizer.step()"},
    {"optim.weight_decay", "", "pass weight_decay={v} to your optimizer (decoupled, as AdamW)"},
    {"optim.beta2", "", "pass betas=(beta1, {v}) to your optimizer"},
    {"optim.name", "stable_adamw", "use StableAdamW (per-tensor update clipping; e.g. "
                                   "optimi.StableAdamW)"},
    {"optim.name", "muon", "use torch.optim.Muon for the hidden weight matrices (AdamW for the "
                           "rest)"},
    {"optim.qk_clip", "", "QK-Clip at {v}: after each optimizer step, rescale W_q and W_k of "
                          "every head whose largest logit exceeded {v}"},
    {"train.spike_policy", "", "skip the optimizer step when the loss or gradient norm spikes (a "
                               "z-score test before optimizer.step(); normlab's trainer calls it "
                               "train.spike_policy = {v})"},
    {"diag.interval", "", "Probe(..., interval={v})"},
    {"diag.per_head", "", "Probe(..., per_head=True)"},
    {"train.log_interval", "", "record every {v} steps"},
};

std::string torch_words(const std::string& key, const std::string& value) {
  for (const TorchWords& w : kTorchWords)
    if (w.key == key && (w.value.empty() || w.value == value))
      return fmt::format(fmt::runtime(w.words), fmt::arg("v", value));
  return fmt::format("the equivalent of normlab's {} = {} in your training code", key, value);
}

// Whether the run's config already holds every value of `set` (and knows every key).
bool already_has(const Run& r, const Sets& set) {
  if (set.empty() || !r.has_config) return false;
  std::vector<std::string> overrides;
  for (const auto& [key, value] : set) {
    if (!r.knows(key)) return false;
    overrides.push_back(key + "=" + value);
  }
  try {
    return parse_config(dump_config_toml(r.cfg), "doctor", overrides) == r.cfg;
  } catch (const ConfigError&) {
    return false;  // the change does not even make a valid config: not the run's own
  }
}

std::string sets_text(const Sets& set) {
  std::string s;
  for (const auto& [key, value] : set)
    s += fmt::format("{}{} = {}", s.empty() ? "" : ", ", key, value);
  return s;
}

}  // namespace

std::string phrase(const Run& r, const std::string& text) {
  if (!r.torch()) return text;
  static const std::regex set_re(R"(--set ([a-z_]+\.[a-z0-9_]+)=([^\s,;:)]+))");
  std::string out;
  auto it = std::sregex_iterator(text.begin(), text.end(), set_re);
  std::size_t at = 0;
  for (; it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out += text.substr(at, static_cast<std::size_t>(m.position(0)) - at);
    out += torch_words(m[1].str(), m[2].str());
    at = static_cast<std::size_t>(m.position(0) + m.length(0));
  }
  return out + text.substr(at);
}

Remedy config_remedy(const Run& r, const std::string& text, Sets set) {
  Remedy m;
  m.text = phrase(r, text);
  m.tried = already_has(r, set);
  m.set = std::move(set);
  return m;
}

Remedy advice(const Run& r, const std::string& text) { return Remedy{phrase(r, text), {}, false}; }

Remedy lower_lr(const Run& r, double to, const std::string& why) {
  if (!r.knows("optim.lr"))
    return advice(r, r.has_config
                         ? "lower the learning rate (the run's own value is unknown: its "
                           "config.toml lists optim.lr in source.unknown, so doctor cannot say "
                           "by how much)"
                         : "lower the learning rate (no config.toml: the run's learning rate is "
                           "unknown)");
  // Three significant digits: 0.0317, not 0.0316667.
  const std::string v = fmt::format("{:.3g}", to);
  return config_remedy(
      r, fmt::format("lower the learning rate: --set optim.lr={} (now {}{})", v, lr_text(r), why),
      {{"optim.lr", v}});
}

json statistic(const std::string& name, double value, double threshold, long onset_step,
               const char* bad_when) {
  return {{"name", name},
          {"value", std::isfinite(value) ? json(value) : json(nullptr)},
          {"threshold", threshold},
          {"onset_step", onset_step},
          {"bad_when", bad_when}};
}

void settle_remedies(const Run& r, std::vector<DoctorFinding>& findings) {
  for (DoctorFinding& f : findings) {
    bool tried = false, open = false;
    for (Remedy& m : f.remedies) {
      if (m.tried) {
        tried = true;
        m.text = fmt::format("{}: the run already has {}, and shows this with it ({})",
                             sets_text(m.set), m.set.size() == 1 ? "it" : "them", f.title);
      } else if (!m.set.empty()) {
        open = true;
      }
    }
    if (f.severity == "problem" && tried && !open)
      f.remedies.push_back(advice(
          r, "none of doctor's config remedies for this applies any more: the run already has "
             "each of them (above); the evidence points past what doctor knows to change"));
  }
}

}  // namespace normlab::doctor_detail
