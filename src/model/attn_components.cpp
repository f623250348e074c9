// The attention components (model/attn_component.h), one row each, in the order their parameters
// are declared into each layer's attention and their fields set on the kernels' arguments.
#include "model/attn_component.h"

namespace normlab {

AttnComponentRow attn_sink_row();  // model/attn_sink.cpp

std::span<const AttnComponentRow> attn_components() {
  static const AttnComponentRow rows[] = {attn_sink_row()};
  return rows;
}

}  // namespace normlab
