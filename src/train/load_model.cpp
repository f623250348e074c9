// Model::load (include/normlab/model.h): a model handle from a checkpoint.
#include "model/model_impl.h"
#include "normlab/checkpoint.h"
#include "normlab/errors.h"
#include "normlab/model.h"
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

}  // namespace normlab
