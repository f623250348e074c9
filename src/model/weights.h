// Model weights <-> safetensors, driven by the parameter table. Loading is all-or-nothing: every
// tensor of the table must be present with its exact shape, nothing else may be in the file, and
// the model's parameters change only once everything has been read and checked.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "normlab/safetensors.h"

namespace normlab {

// Throws FormatError naming every missing, unexpected or mis-shaped tensor.
template <class T>
void load_weights(Transformer<T>& model, const SafetensorsFile& file);

// Partial loading, for starting a run from another model's weights (train.init_from): which of
// the model's parameters were copied, which kept their initialization (not in the file), and
// which tensors of the file the model has no parameter for.
struct WeightMatch {
  std::vector<std::string> copied, initialized, dropped;
};
// Copies every parameter of the table that the file holds under its name with its shape; leaves
// the others as they are (but σReparam's gamma, u and v, when any is missing, are all set afresh
// from the loaded weights: Transformer::init_sigma_reparam). All-or-nothing: throws FormatError naming every tensor whose shape
// differs from the parameter of that name (nothing is changed then).
template <class T>
WeightMatch load_matching_weights(Transformer<T>& model, const SafetensorsFile& file);

// Writes the parameters as F32 (or F64 when T = double) tensors named as in the table, in table
// order, atomically. `prefix` is prepended to every name (e.g. "grad.").
template <class T>
void save_weights(const std::string& path, const ParamTable& table, const T* arena,
                  const std::map<std::string, std::string>& metadata = {});

// The same tensors as TensorToWrite records (pointing into `arena`), for files that hold more.
template <class T>
std::vector<TensorToWrite> weight_records(const ParamTable& table, const T* arena,
                                          const std::string& prefix = "");

}  // namespace normlab
