// Model::load, save and load_weights (include/normlab/model.h): a model handle from and to
// checkpoints and safetensors files. Here rather than in src/model: files are interop's business,
// which sits above the model.
#include "model/weights.h"
#include "model/model_impl.h"
#include "normlab/checkpoint.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/model.h"
#include "normlab/safetensors.h"
#include "train/checkpoint.h"

namespace normlab {

Model Model::load(const std::string& checkpoint, int max_batch) {
  const std::string dir = resolve_checkpoint(checkpoint);
  const Config cfg = checkpoint_config(dir);
  if (max_batch < 1) throw InputError("[model] max_batch must be >= 1");
  auto impl = std::make_unique<Impl>(cfg.model, max_batch);
  load_checkpoint(dir, impl->net, nullptr, nullptr);
  return Model(std::move(impl));
}

void Model::save(const std::string& path) const {
  Config cfg;
  cfg.model = config();
  // The metadata of a checkpoint's model.safetensors, so that tools that read those read this.
  const std::map<std::string, std::string> meta = {{"format", "pt"},
                                                   {"normlab_config", config_to_json(cfg).dump()}};
  save_weights(path, impl_->net.table(), impl_->net.params().data(), meta);
}

void Model::load_weights(const std::string& path) {
  normlab::load_weights(impl_->net, SafetensorsFile::open(path));
}

}  // namespace normlab
