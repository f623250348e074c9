// What a normlab::Model handle holds (include/normlab/model.h): the engine's Transformer.
#pragma once
#include "model/transformer.h"
#include "normlab/model.h"

namespace normlab {

struct Model::Impl {
  Impl(const ModelConfig& cfg, int max_batch) : net(cfg, max_batch, cfg.seq_len) {}
  Transformer<float> net;
};

}  // namespace normlab
