// Hugging Face transformers interchange (see hf.h): the generic reader and writer that interpret
// the family records of hf_family_*.cpp. Nothing here names a family.
#include "interop/hf.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interop/hf_export_keys.h"
#include "interop/hf_family.h"
#include "model/mup.h"
#include "model/param_table.h"
#include "model/plan.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"

namespace fs = std::filesystem;

namespace normlab {

using hf::Dim;
using hf::FamilySpec;
using hf::json;
using hf::LinkRule;

std::string_view to_string(HfFamily f) { return hf::family_spec(f).model_type; }

namespace {

// ---------------------------------------------------------------------------------------------
// Tensors: one file or shards named by model.safetensors.index.json.

class TensorSource {
 public:
  explicit TensorSource(const fs::path& dir) {
    const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    if (fs::exists(single)) {
      add(SafetensorsFile::open(single.string()));
    } else if (fs::exists(index)) {
      std::ifstream in(index);
      json j;
      try {
        j = json::parse(in);
      } catch (const std::exception& e) {
        throw FormatError(fmt::format("[hf] {}: not valid JSON: {}", index.string(), e.what()));
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw FormatError(fmt::format("[hf] {}: no \"weight_map\" object", index.string()));
      std::set<std::string> shards;
      for (const auto& [name, file] : j["weight_map"].items())
        if (file.is_string()) shards.insert(file.get<std::string>());
      for (const auto& s : shards) {
        if (s.find('/') != std::string::npos || s.find("..") != std::string::npos)
          throw FormatError(fmt::format("[hf] {}: shard name '{}' is not a file of the directory",
                                        index.string(), s));
        add(SafetensorsFile::open((dir / s).string()));
      }
    } else {
      throw FormatError(fmt::format("[hf] {} has neither model.safetensors nor "
                                    "model.safetensors.index.json (pickled .bin files are not "
                                    "read)",
                                    dir.string()));
    }
  }
  const SafetensorsFile* file_of(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : &files_[it->second];
  }
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, i] : where_) out.push_back(n);
    return out;
  }

 private:
  void add(SafetensorsFile f) {
    for (const auto& t : f.tensors())
      if (!where_.emplace(t.name, files_.size()).second)
        throw FormatError(fmt::format("[hf] tensor '{}' appears in more than one shard", t.name));
    files_.push_back(std::move(f));
  }
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t> where_;
};

// Rows and columns of the normlab block a link covers.
struct LinkGeom {
  std::int64_t rows, cols;
};
LinkGeom geom(const HfLink& l) {
  std::int64_t numel = 1;
  for (auto d : l.hf_shape) numel *= d;
  const std::int64_t rows = l.hf_shape.size() == 1 ? l.hf_shape[0]
                            : l.transpose          ? l.hf_shape[1]
                                                   : l.hf_shape[0];
  return {rows, numel / rows};
}

// Checks that the links tile the table: each link inside its parameter, every parameter covered
// exactly once. A failure is a bug in hf_links, never the user's fault.
void check_coverage(const std::vector<HfLink>& links, const ParamTable& table) {
  std::map<std::string, std::int64_t> covered;
  for (const HfLink& l : links) {
    const ParamSpec* s = table.find(l.nl_name);
    NL_CHECK(s, "HF link '{}' targets unknown parameter '{}'", l.hf_name, l.nl_name);
    const LinkGeom g = geom(l);
    const std::int64_t cols = s->shape.size() == 1 ? 1 : s->numel / s->shape[0];
    NL_CHECK(g.cols == cols && l.row0 + g.rows <= s->shape[0],
             "HF link '{}' does not fit parameter '{}'", l.hf_name, l.nl_name);
    covered[l.nl_name] += g.rows * g.cols;
  }
  for (const ParamSpec& s : table.specs())
    NL_CHECK(covered[s.name] == s.numel, "parameter '{}' is covered by {} of {} elements of HF "
             "tensors", s.name, covered[s.name], s.numel);
}

// hf (link's shape) -> normlab arena block, or back.
void scatter(const HfLink& l, const ParamSpec& s, const float* hf, float* arena) {
  const LinkGeom g = geom(l);
  float* dst = arena + s.offset + l.row0 * g.cols;
  for (std::int64_t r = 0; r < g.rows; ++r)
    for (std::int64_t c = 0; c < g.cols; ++c)
      dst[r * g.cols + c] = l.transpose ? hf[c * g.rows + r] : hf[r * g.cols + c];
}
void gather(const HfLink& l, const ParamSpec& s, const float* arena, float* hf) {
  const LinkGeom g = geom(l);
  const float* src = arena + s.offset + l.row0 * g.cols;
  for (std::int64_t r = 0; r < g.rows; ++r)
    for (std::int64_t c = 0; c < g.cols; ++c)
      (l.transpose ? hf[c * g.rows + r] : hf[r * g.cols + c]) = src[r * g.cols + c];
}

json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw FormatError(fmt::format("[hf] cannot read {}", p.string()));
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw FormatError(fmt::format("[hf] {}: not valid JSON: {}", p.string(), e.what()));
  }
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw Error(fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path);
}

std::string join_problems(const std::vector<std::string>& p) {
  std::string s;
  for (const auto& x : p) s += "\n  " + x;
  return s;
}

// ---------------------------------------------------------------------------------------------
// config.json -> ModelConfig through a family record.

// The family's MLP whose activation has formula `a`, if any.
std::optional<MlpKind> mlp_of(hf::ActFormula a, const FamilySpec& f) {
  auto formula = [](MlpKind m) {
    switch (m) {
      case MlpKind::gelu_tanh:
      case MlpKind::geglu: return hf::ActFormula::tanh_gelu;
      case MlpKind::gelu: return hf::ActFormula::erf_gelu;
      case MlpKind::swiglu: return hf::ActFormula::silu;
    }
    return hf::ActFormula::other;
  };
  for (const hf::Activation& act : f.acts)
    if (a != hf::ActFormula::other && formula(act.mlp) == a) return act.mlp;
  return std::nullopt;
}

// num_key_value_heads and head_dim -> n_kv_head and head_dim, written canonically (0 when they
// are the defaults n_head and d_model / n_head) so that an export imports back to the same config.
void read_head_layout(hf::HfKeys& k, const FamilySpec& f, ModelConfig& m) {
  const long H = m.n_head, C = m.d_model;
  const long kv = k.optional_integer("num_key_value_heads", f.kv_heads_default).value_or(H);
  if (kv < 1 || (H > 0 && H % kv != 0))
    k.refuse_value("num_key_value_heads", std::to_string(kv),
                   fmt::format("must divide num_attention_heads = {}", H));
  else
    m.n_kv_head = kv == H ? 0 : static_cast<int>(kv);
  const std::optional<long> hd = k.optional_integer("head_dim", f.head_dim_default);
  if (hd && *hd < 1)
    k.refuse_value("head_dim", std::to_string(*hd), "must be >= 1");
  else if (hd && !(H > 0 && C % H == 0 && *hd == C / H))
    m.head_dim = static_cast<int>(*hd);
}

// The key map, the options the family implies, then the family's own keys (read_rest).
ModelConfig read_config(hf::HfKeys& k, const FamilySpec& f, hf::ReadContext& cx) {
  ModelConfig m;
  for (const hf::IntKey& key : f.ints) {
    long v = key.per_d_model ? key.def * m.d_model : key.def;
    for (auto it = key.keys.rbegin(); it != key.keys.rend(); ++it) v = k.integer(*it, v);
    m.*key.field = static_cast<int>(v);
  }
  m.placement = f.placement;
  m.norm = f.norm;
  m.pos = f.pos;
  m.norm_bias = m.bias = f.biases == hf::BiasKeys::all;
  if (f.qk_norm != QKNormKind::none) {
    m.qk_norm = f.qk_norm;
    m.qk_norm_scope = f.qk_scope;
    m.qk_norm_position = QKNormPosition::pre_rope;
  }
  if (f.gemma_scaling) {
    m.norm_gain_offset = 1.0;
    m.embed_scale = std::sqrt(static_cast<double>(m.d_model));
  }
  if (f.head_layout_keys) read_head_layout(k, f, m);
  m.norm_eps = k.number(f.eps_key, f.eps_default);
  m.tie_embeddings = k.boolean("tie_word_embeddings", f.tie_default);
  if (const auto mlp = mlp_of(hf::act_formula(k.string(f.act_key, f.act_default)), f))
    m.mlp = *mlp;
  else
    k.refuse(f.act_key, f.act_refusal);
  f.read_rest(k, f, m, cx);
  return m;
}

std::string family_names() {
  std::string s;
  for (const FamilySpec& f : hf::families()) {
    s += fmt::format("{}{}", s.empty() ? "" : ", ", f.model_type);
    if (f.wrapper_type) s += fmt::format(", {}", f.wrapper_type);
  }
  return s;
}

}  // namespace

// -----------------------------------------------------------------------------------------------

std::vector<HfLink> hf_links(HfFamily family, const ModelConfig& m) {
  const FamilySpec& f = hf::family_spec(family);
  auto size = [&](Dim d) -> std::int64_t {
    switch (d) {
      case Dim::none: return 0;
      case Dim::C: return m.d_model;
      case Dim::Q: return m.q_width();
      case Dim::KV: return m.kv_width();
      case Dim::QK: return m.q_width() + m.kv_width();
      case Dim::QKV: return m.q_width() + 2L * m.kv_width();
      case Dim::F: return m.d_ff;
      case Dim::V: return m.vocab_size;
      case Dim::T: return m.seq_len;
      case Dim::D: return m.head_size();
    }
    return 0;
  };
  std::vector<HfLink> links;
  auto add = [&](const LinkRule& r, const std::string& hf_pre, const std::string& nl_pre) {
    const bool present = r.when == hf::When::always ||
                         (r.when == hf::When::qkv_bias && m.has_qkv_bias()) ||
                         (r.when == hf::When::out_bias && m.has_out_bias()) ||
                         (r.when == hf::When::mlp_bias && m.has_mlp_bias()) ||
                         (r.when == hf::When::untied && !m.tie_embeddings);
    if (!present) return;
    std::vector<std::int64_t> shape{size(r.rows)};
    if (r.cols != Dim::none) shape.push_back(size(r.cols));
    const std::int64_t row0 = r.part * size(r.unit == Dim::none ? r.rows : r.unit);
    links.push_back({hf_pre + r.hf, shape, nl_pre + r.nl, row0, r.transpose});
  };
  for (const LinkRule& r : f.begin) add(r, "", "");
  for (int l = 0; l < m.n_layer; ++l)
    for (const LinkRule& r : f.block)
      add(r, fmt::format("{}{}{}.", f.prefixes[0], f.layers, l), fmt::format("blocks.{}.", l));
  for (const LinkRule& r : f.end) add(r, "", "");
  return links;
}

HfFamily hf_family_for(const ModelConfig& m) {
  // No transformers family has a norm-free layer, nGPT or Admin (refused by value here) or the
  // options hf_export_keys.cpp refuses: at any placement, before a family is looked for.
  {
    std::vector<std::string> p;
    if (m.norm == NormKind::dyt || m.norm == NormKind::derf)
      p.push_back(fmt::format("model.norm = {}: no supported transformers family has DyT or Derf "
                              "(their norms are LayerNorm or RMSNorm)", to_string(m.norm)));
    if (m.qk_norm == QKNormKind::dyt || m.qk_norm == QKNormKind::derf)
      p.push_back(fmt::format("model.qk_norm = {}: no supported transformers family has DyT or "
                              "Derf (their QK-norms are RMSNorm)", to_string(m.qk_norm)));
    // Every model key no family carries (table: hf_export_keys.cpp), a new option's included.
    for (auto& u : hf::unexportable_keys(m)) p.push_back(std::move(u));
    if (m.placement == Placement::ngpt)
      p.push_back("model.placement = ngpt: no supported transformers family is a normalized "
                  "Transformer (unit-norm states and weights, learned eigen learning rates and "
                  "scales s_qk, s_u, s_v, s_z)");
    if (m.init == InitKind::admin)
      p.push_back("model.init = admin: no supported transformers family has Admin's shortcut scale "
                  "(res_omega) on the residual");
    if (!p.empty()) throw ConfigError(std::move(p));
  }
  Placement placement = m.placement;
  if (placement == Placement::mix) {
    // Mix-LN whose post-norm share rounds to zero blocks is pre-norm in every block.
    const ModelPlan plan = build_plan(m);
    auto is_pre = [](const BlockPlan& b) {
      return b.attn.norm_in && !b.attn.norm_after_add && b.mlp.norm_in && !b.mlp.norm_after_add;
    };
    if (std::all_of(plan.blocks.begin(), plan.blocks.end(), is_pre)) placement = Placement::pre;
  }
  const FamilySpec* f = nullptr;
  std::string by_placement;  // "gpt2, llama: pre; gemma2, gemma3_text: peri; ..."
  const auto& all = hf::families();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!f && all[i].placement == placement && all[i].selects(m)) f = &all[i];
    const bool last_of_group = i + 1 == all.size() || all[i + 1].placement != all[i].placement;
    by_placement += fmt::format("{}{}", all[i].model_type,
                                last_of_group ? fmt::format(": {}{}", to_string(all[i].placement),
                                                            i + 1 == all.size() ? "" : "; ")
                                              : ", ");
  }
  if (!f)
    throw ConfigError({fmt::format(
        "model.placement = {}{}: no supported transformers family has it ({})",
        to_string(m.placement),
        m.placement == Placement::mix ? fmt::format(" (mix_ratio = {})", m.mix_ratio) : "",
        by_placement)});
  std::vector<std::string> p;
  if (m.parametrization == Parametrization::mup) {
    // Hugging Face's models compute logits as h W^T and scores with their own fixed scale.
    const double D = m.head_size(), sp_scale = m.attn_scale > 0 ? m.attn_scale : 1.0 / std::sqrt(D);
    if (readout_multiplier(m) != 1.0)
      p.push_back(fmt::format("model.parametrization = mup: the readout multiplier {:.6g} "
                              "(mup_output_mult x mup_base_width / d_model) has no place in {}'s "
                              "config [export to {}]", readout_multiplier(m), f->model_type,
                              f->model_type));
    if (std::fabs(attention_scale(m) - sp_scale) > 1e-12 * sp_scale)
      p.push_back(fmt::format("model.parametrization = mup: the attention scale {:.6g} (1/d "
                              "against the base head size) is not {}'s {:.6g} [export to {}]",
                              attention_scale(m), f->model_type, sp_scale, f->model_type));
  }
  for (const hf::Requirement& r : f->needs)
    if (!r.ok(m, *f)) p.push_back(r.why(m, *f) + fmt::format(" [export to {}]", f->model_type));
  if (!p.empty()) throw ConfigError(std::move(p));
  return f->id;
}

std::string hf_config_json(HfFamily family, const ModelConfig& m) {
  const FamilySpec& f = hf::family_spec(family);
  json j;
  j["dtype"] = "float32";
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["pad_token_id"] = nullptr;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["initializer_range"] = m.init_std;
  j["architectures"] = {f.architecture};
  j["model_type"] = f.model_type;
  for (const hf::IntKey& key : f.ints) j[key.keys[0]] = m.*key.field;
  if (f.head_layout_keys) {
    j["num_key_value_heads"] = m.kv_heads();
    j["head_dim"] = m.head_size();
  }
  j[f.eps_key] = m.norm_eps;
  const auto act = std::find_if(f.acts.begin(), f.acts.end(),
                                [&](const hf::Activation& a) { return a.mlp == m.mlp; });
  j[f.act_key] = act == f.acts.end() ? f.acts.front().hf_name : act->hf_name;
  f.write_rest(j, f, m);
  return j.dump(2) + "\n";
}

std::map<std::string, std::vector<float>> hf_tensors(HfFamily f, const ModelConfig& m,
                                                     const ParamTable& table, const float* arena) {
  const auto links = hf_links(f, m);
  check_coverage(links, table);
  std::map<std::string, std::vector<float>> out;
  for (const HfLink& l : links) {
    const LinkGeom g = geom(l);
    std::vector<float> t(g.rows * g.cols);
    gather(l, *table.find(l.nl_name), arena, t.data());
    out.emplace(l.hf_name, std::move(t));
  }
  return out;
}

HfFamily export_hf(const ModelConfig& m, const ParamTable& table, const float* params,
                   const std::string& out_dir) {
  const HfFamily f = hf_family_for(m);
  const auto links = hf_links(f, m);
  const auto tensors = hf_tensors(f, m, table, params);
  std::vector<TensorToWrite> recs;
  for (const HfLink& l : links) {
    const auto& t = tensors.at(l.hf_name);
    recs.push_back({l.hf_name, DType::F32, l.hf_shape,
                    std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(t.data()),
                                                  t.size() * sizeof(float))});
  }
  const fs::path dir(out_dir);
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), recs, {{"format", "pt"}});
  write_text_atomic(dir / "config.json", hf_config_json(f, m));
  return f;
}


namespace {

// config.json of DIR as a normlab model; throws FormatError naming every problem.
struct ImportedConfig {
  const FamilySpec* family = nullptr;
  bool wrapped = false;  // the family's multimodal wrapper (gemma3): its language model
  ModelConfig model;
};
ImportedConfig import_config(const fs::path& cfg_path, int max_seq_len,
                             std::vector<std::string>& notes) {
  const json top = read_json_file(cfg_path);
  std::vector<std::string> problems;
  hf::HfKeys top_keys(top, "", problems);
  const std::string model_type = top_keys.string("model_type", "");
  ImportedConfig out;
  for (const FamilySpec& f : hf::families()) {
    if (model_type == f.model_type) out.family = &f;
    if (f.wrapper_type && model_type == f.wrapper_type) {
      out.family = &f;
      out.wrapped = true;
    }
  }
  if (!out.family) {
    top_keys.refuse("model_type", fmt::format("not a supported family ({})", family_names()));
    throw FormatError(fmt::format("[hf] {} cannot be imported exactly:{}", cfg_path.string(),
                                  join_problems(problems)));
  }
  const json* text = &top;
  if (out.wrapped) {
    // The language model is text_config; vision is skipped.
    const json* tc = top_keys.raw("text_config");
    if (!tc || !tc->is_object())
      throw FormatError(fmt::format("[hf] {}: model_type = \"{}\" without a text_config object",
                                    cfg_path.string(), model_type));
    text = tc;
    notes.push_back(fmt::format("{}: the language model (text_config) is imported; vision tower "
                                "and projector weights are skipped", model_type));
  }
  hf::HfKeys k(*text, out.wrapped ? "text_config." : "", problems);
  hf::ReadContext cx{max_seq_len, notes};
  out.model = read_config(k, *out.family, cx);
  if (out.wrapped) out.family->unwrap(top_keys, k, out.model, notes);
  if (!problems.empty())
    throw FormatError(fmt::format("[hf] {} cannot be imported exactly:{}", cfg_path.string(),
                                  join_problems(problems)));
  Config c;
  c.model = out.model;
  auto errs = validation_errors(c);
  if (!errs.empty())
    throw FormatError(fmt::format("[hf] {} maps to an invalid normlab model:{}", cfg_path.string(),
                                  join_problems(errs)));
  return out;
}

// HF tensor names as the files spell them: the base prefix may be missing (old GPT-2 checkpoints)
// or nest the language model (Gemma 3 multimodal); found by the prefix that holds the embedding.
struct FileNames {
  std::string canon, prefix, head;
  std::string operator()(const std::string& name) const {
    if (name == "lm_head.weight") return head;
    return prefix + name.substr(canon.size());
  }
};
FileNames file_names(const FamilySpec& f, const TensorSource& src) {
  FileNames n;
  n.canon = n.prefix = f.prefixes[0];
  const std::string emb = std::string(f.begin[0].hf).substr(n.canon.size());
  for (const char* p : f.prefixes)
    if (src.has(p + emb)) {
      n.prefix = p;
      break;
    }
  n.head = !src.has("lm_head.weight") && src.has("language_model.lm_head.weight")
               ? "language_model.lm_head.weight"
               : "lm_head.weight";
  return n;
}

// Reads every linked tensor into the arena; problems for missing, mis-shaped or unexpected ones.
void import_tensors(const TensorSource& src, const ImportedConfig& ic, const ParamTable& table,
                    std::vector<float>& params, std::vector<std::string>& problems) {
  const ModelConfig& m = ic.model;
  const auto links = hf_links(ic.family->id, m);
  check_coverage(links, table);
  const FileNames names = file_names(*ic.family, src);
  params.assign(table.total(), 0.0f);
  std::set<std::string> used;
  for (const HfLink& l : links) {
    const std::string name = names(l.hf_name);
    const SafetensorsFile* file = src.file_of(name);
    if (!file) {
      problems.push_back(
          fmt::format("missing tensor '{}' (shape [{}])", name, fmt::join(l.hf_shape, ", ")));
      continue;
    }
    used.insert(name);
    const LinkGeom g = geom(l);
    std::vector<float> buf(g.rows * g.cols);
    try {
      file->read_f32(name, buf, l.hf_shape);
    } catch (const FormatError& e) {
      problems.push_back(e.what());
      continue;
    }
    scatter(l, *table.find(l.nl_name), buf.data(), params.data());
  }
  for (const auto& name : src.names()) {
    if (used.count(name)) continue;
    const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                        name.ends_with("rotary_emb.inv_freq");
    const bool tied_head = m.tie_embeddings && name == names.head;  // HF ties it to the embedding
    const bool vision = ic.wrapped && name.rfind(names.prefix, 0) != 0 && name != names.head;
    if (!buffer && !tied_head && !vision)
      problems.push_back(fmt::format("unexpected tensor '{}': it has no place in the {} model "
                                     "config.json describes", name, ic.family->model_type));
  }
}

}  // namespace

HfModel import_hf(const std::string& dir_str, int max_seq_len) {
  const fs::path dir(dir_str);
  std::vector<std::string> notes, problems;
  const ImportedConfig ic = import_config(dir / "config.json", max_seq_len, notes);
  HfModel out;
  out.family = ic.family->id;
  out.config.model = ic.model;
  const TensorSource src(dir);
  const ParamLayout layout = build_param_table(ic.model, build_plan(ic.model));
  import_tensors(src, ic, layout.table, out.params, problems);
  if (!problems.empty())
    throw FormatError(fmt::format("[hf] {}: the weights do not match config.json:{}", dir_str,
                                  join_problems(problems)));
  out.notes = std::move(notes);
  return out;
}

}  // namespace normlab
