// torch.lerp's rounding, which PyTorch's optimizers use for their moving averages (m.lerp_(g, w)):
// a + w (b - a) when |w| < 0.5, else b - (b - a)(1 - w), so that w = 1 gives b exactly.
#pragma once
#include <cmath>

namespace normlab {

template <class T>
inline T lerp_torch(T a, T b, T w) {
  return std::fabs(w) < T(0.5) ? a + w * (b - a) : b - (b - a) * (T(1) - w);
}

}  // namespace normlab
