// Pointwise activations (exact GELU, GPT-2's tanh GELU, SiLU) with their derivatives, and the
// elementwise forward/backward over a buffer. Gated variants live in glu.h.
#pragma once
#include <cmath>

namespace normlab::ops {

enum class Activation { gelu_erf, gelu_tanh, silu };

// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2));  d/dx = Phi(x) + x phi(x)
// gelu_tanh(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
// silu(x) = x sigmoid(x);  d/dx = sig(x) (1 + x (1 - sig(x)))
template <class T>
inline T act_value(Activation a, T x) {
  switch (a) {
    case Activation::gelu_erf:
      return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
    case Activation::gelu_tanh: {
      const T k = T(0.79788456080286535588);
      return T(0.5) * x * (T(1) + std::tanh(k * (x + T(0.044715) * x * x * x)));
    }
    case Activation::silu:
      return x / (T(1) + std::exp(-x));
  }
  return x;
}

template <class T>
inline T act_grad(Activation a, T x) {
  switch (a) {
    case Activation::gelu_erf: {
      const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
      const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
      return cdf + x * pdf;
    }
    case Activation::gelu_tanh: {
      const T k = T(0.79788456080286535588);
      const T u = k * (x + T(0.044715) * x * x * x);
      const T th = std::tanh(u);
      const T du = k * (T(1) + T(3) * T(0.044715) * x * x);
      return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
    }
    case Activation::silu: {
      const T s = T(1) / (T(1) + std::exp(-x));
      return s * (T(1) + x * (T(1) - s));
    }
  }
  return T(1);
}

// y = act(x) over n elements (overwrites y)
template <class T>
void activation_forward(Activation a, T* y, const T* x, long n) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (long i = 0; i < n; ++i) y[i] = act_value(a, x[i]);
}

// dx += dy * act'(x)   (accumulates)
template <class T>
void activation_backward(Activation a, T* dx, const T* dy, const T* x, long n) {
#pragma omp parallel for schedule(static) if (n > 32768)
  for (long i = 0; i < n; ++i) dx[i] += dy[i] * act_grad(a, x[i]);
}

}  // namespace normlab::ops
