// Rotary position embedding (Su et al. 2021), "rotate half" convention as in Llama / HF
// transformers: for each head vector x of size D and position t, pairs (x[i], x[i + D/2]), i < D/2,
// are rotated by the angle t * theta^(-2i/D). Shapes: x, y, dx, dy (B, T, H, D) rows; cos, sin
// (T_max, D/2) tables; positions start at pos0.
#pragma once
#include <cmath>
#include <vector>

#include "ops/accum.h"
#include "tensor/threading.h"

namespace normlab::ops {

// How the inverse frequencies are scaled (kernels know nothing of configs; model code maps
// ModelConfig::rope_scaling onto this).
struct RopeScale {
  enum class Kind { none, linear, llama3 };
  Kind kind = Kind::none;
  double factor = 1.0;            // linear, llama3
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  double original_seq_len = 8192; // llama3
};

// Inverse frequencies f_i, i < D/2: theta^(-2i/D), then scaled
//   linear: f_i / factor (position interpolation, Chen et al. 2023);
//   llama3: with wavelength w_i = 2 pi / f_i, lo = original / low_freq_factor, hi = original /
//     high_freq_factor: w_i > lo -> f_i / factor; w_i < hi -> f_i; otherwise the blend
//     (1 - a) f_i / factor + a f_i, a = (original / w_i - low_freq_factor) / (high_freq_factor -
//     low_freq_factor)  (Llama 3.1).
inline std::vector<double> rope_inv_freq(int D, double theta, const RopeScale& s = {}) {
  const int half = D / 2;
  std::vector<double> f(half);
  for (int i = 0; i < half; ++i) f[i] = std::pow(theta, -2.0 * i / D);
  if (s.kind == RopeScale::Kind::linear) {
    for (double& x : f) x /= s.factor;
  } else if (s.kind == RopeScale::Kind::llama3) {
    const double pi = 3.14159265358979323846;
    const double lo_wavelen = s.original_seq_len / s.low_freq_factor;
    const double hi_wavelen = s.original_seq_len / s.high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * pi / x;
      if (wavelen > lo_wavelen) {
        x /= s.factor;
      } else if (!(wavelen < hi_wavelen)) {
        const double a = (s.original_seq_len / wavelen - s.low_freq_factor) /
                         (s.high_freq_factor - s.low_freq_factor);
        x = (1 - a) * x / s.factor + a * x;
      }
    }
  }
  return f;
}

// Fills cos/sin tables (T_max, D/2) of the angles t * f_i, computed in double.
template <class T>
void rope_tables(T* cos_t, T* sin_t, int T_max, int D, double theta, const RopeScale& s = {}) {
  const int half = D / 2;
  const std::vector<double> f = rope_inv_freq(D, theta, s);
  for (int t = 0; t < T_max; ++t)
    for (int i = 0; i < half; ++i) {
      const double a = t * f[i];
      cos_t[t * half + i] = static_cast<T>(std::cos(a));
      sin_t[t * half + i] = static_cast<T>(std::sin(a));
    }
}

// y = R(t) x   (overwrites y; y may alias x)
template <class T>
void rope_forward(T* y, const T* x, const T* cos_t, const T* sin_t, int B, int Tn, int H, int D,
                  int pos0 = 0) {
  const int half = D / 2;
  parallel_for(static_cast<long>(B) * Tn, 16384 / (H * D) + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const int t = static_cast<int>(r % Tn);
      const T* c = cos_t + static_cast<long>(pos0 + t) * half;
      const T* s = sin_t + static_cast<long>(pos0 + t) * half;
      for (int h = 0; h < H; ++h) {
        const long off = (r * H + h) * D;
        for (int i = 0; i < half; ++i) {
          const T x1 = x[off + i], x2 = x[off + i + half];
          y[off + i] = x1 * c[i] - x2 * s[i];
          y[off + i + half] = x2 * c[i] + x1 * s[i];
        }
      }
    }
  });
}

// dx (+)= R(t)^T dy:  dx1 (+)= dy1 cos + dy2 sin;  dx2 (+)= dy2 cos - dy1 sin
// (Accum::add adds, ::overwrite replaces; ops/accum.h)
template <class T>
void rope_backward(T* dx, const T* dy, const T* cos_t, const T* sin_t, int B, int Tn, int H, int D,
                   Accum accum) {
  const int half = D / 2;
  parallel_for(static_cast<long>(B) * Tn, 16384 / (H * D) + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const int t = static_cast<int>(r % Tn);
      const T* c = cos_t + static_cast<long>(t) * half;
      const T* s = sin_t + static_cast<long>(t) * half;
      for (int h = 0; h < H; ++h) {
        const long off = (r * H + h) * D;
        if (accum == Accum::add) {
#pragma omp simd
          for (int i = 0; i < half; ++i) {
            const T d1 = dy[off + i], d2 = dy[off + i + half];
            dx[off + i] += d1 * c[i] + d2 * s[i];
            dx[off + i + half] += d2 * c[i] - d1 * s[i];
          }
        } else {
#pragma omp simd
          for (int i = 0; i < half; ++i) {
            const T d1 = dy[off + i], d2 = dy[off + i + half];
            dx[off + i] = d1 * c[i] + d2 * s[i];
            dx[off + i + half] = d2 * c[i] - d1 * s[i];
          }
        }
      }
    }
  });
}

}  // namespace normlab::ops
