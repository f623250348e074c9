#include "model/weights.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "normlab/errors.h"

namespace normlab {

namespace {

// Reads parameter s from the file into its slot of `staged` (an arena); a problem is recorded.
template <class T>
bool read_param(const SafetensorsFile& file, const ParamSpec& s, std::vector<T>& staged,
                std::vector<std::string>& problems) {
  try {
    std::span<T> dst(staged.data() + s.offset, s.numel);
    if constexpr (std::is_same_v<T, float>)
      file.read_f32(s.name, dst, s.shape);
    else
      file.read_f64(s.name, dst, s.shape);
    return true;
  } catch (const FormatError& e) {
    problems.push_back(e.what());
    return false;
  }
}

}  // namespace

template <class T>
void load_weights(Transformer<T>& model, const SafetensorsFile& file) {
  const ParamTable& table = model.table();
  std::vector<std::string> problems;
  std::set<std::string> expected;
  for (const ParamSpec& s : table.specs()) expected.insert(s.name);
  for (const TensorInfo& t : file.tensors())
    if (!expected.count(t.name))
      problems.push_back(fmt::format("unexpected tensor '{}' (shape [{}]) is not a parameter of this "
                                     "model", t.name, fmt::join(t.shape, ", ")));
  std::vector<T> staged(model.params().size(), T(0));
  for (const ParamSpec& s : table.specs()) {
    const TensorInfo* t = file.find(s.name);
    if (!t) {
      problems.push_back(fmt::format("missing tensor '{}' (shape [{}])", s.name, fmt::join(s.shape, ", ")));
      continue;
    }
    read_param(file, s, staged, problems);
  }
  if (!problems.empty()) {
    std::string msg = fmt::format("[weights] {} does not match the model config:", file.name());
    for (const auto& p : problems) msg += "\n  " + p;
    throw FormatError(msg);
  }
  std::copy(staged.begin(), staged.end(), model.params().begin());
}

template <class T>
WeightMatch load_matching_weights(Transformer<T>& model, const SafetensorsFile& file) {
  const ParamTable& table = model.table();
  WeightMatch match;
  std::vector<std::string> problems;
  std::set<std::string> names;
  for (const ParamSpec& s : table.specs()) names.insert(s.name);
  for (const TensorInfo& t : file.tensors())
    if (!names.count(t.name)) match.dropped.push_back(t.name);
  std::vector<T> staged(model.params().begin(), model.params().end());
  bool sigma_missing = false;  // σReparam state (gamma, u, v) the file lacks
  for (const ParamSpec& s : table.specs()) {
    const TensorInfo* t = file.find(s.name);
    if (!t) {
      match.initialized.push_back(s.name);
      sigma_missing = sigma_missing || is_sigma_state(s.role);
      continue;
    }
    if (t->shape != s.shape) {
      problems.push_back(fmt::format("'{}' has shape [{}] there but [{}] in this model", s.name,
                                     fmt::join(t->shape, ", "), fmt::join(s.shape, ", ")));
      continue;
    }
    if (read_param(file, s, staged, problems)) match.copied.push_back(s.name);
  }
  if (!problems.empty()) {
    std::string msg = fmt::format(
        "[weights] {}: parameters whose shape differs cannot be carried over (change the model "
        "config so that they match, or leave them out of it):", file.name());
    for (const auto& p : problems) msg += "\n  " + p;
    throw FormatError(msg);
  }
  std::copy(staged.begin(), staged.end(), model.params().begin());
  // σReparam's gamma, u and v belong to the weights they were computed from: when the file lacks
  // them (weights of a model without σReparam), they are set afresh from the loaded weights, so
  // that W_hat = W as at initialisation.
  if (sigma_missing) model.init_sigma_reparam();
  return match;
}

template <class T>
std::vector<TensorToWrite> weight_records(const ParamTable& table, const T* arena,
                                          const std::string& prefix) {
  std::vector<TensorToWrite> out;
  for (const ParamSpec& s : table.specs()) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(arena + s.offset);
    out.push_back({prefix + s.name, std::is_same_v<T, float> ? DType::F32 : DType::F64, s.shape,
                   std::span<const std::uint8_t>(bytes, sizeof(T) * s.numel)});
  }
  return out;
}

template <class T>
void save_weights(const std::string& path, const ParamTable& table, const T* arena,
                  const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, weight_records(table, arena), metadata);
}

template void load_weights(Transformer<float>&, const SafetensorsFile&);
template WeightMatch load_matching_weights(Transformer<float>&, const SafetensorsFile&);
template WeightMatch load_matching_weights(Transformer<double>&, const SafetensorsFile&);
template void load_weights(Transformer<double>&, const SafetensorsFile&);
template std::vector<TensorToWrite> weight_records(const ParamTable&, const float*, const std::string&);
template std::vector<TensorToWrite> weight_records(const ParamTable&, const double*, const std::string&);
template void save_weights(const std::string&, const ParamTable&, const float*,
                           const std::map<std::string, std::string>&);
template void save_weights(const std::string&, const ParamTable&, const double*,
                           const std::map<std::string, std::string>&);

}  // namespace normlab
