// Pointwise activations (exact GELU, GPT-2's tanh GELU, SiLU) with their derivatives, and the
// elementwise forward/backward over a buffer. Gated variants live in glu.h.
// act_value / act_grad (runtime kind) are the plain references; the buffer loops instantiate the
// kind at compile time so that they vectorise, with exp/tanh from vec_math.h (float: vectorisable
// approximations within 3e-7; double: the library functions, so gradient checks are unchanged).
#pragma once
#include <cmath>
#include <type_traits>

#include "ops/accum.h"
#include "tensor/threading.h"
#include "tensor/vec_math.h"

namespace normlab::ops {

enum class Activation { gelu_erf, gelu_tanh, silu };

// gelu_erf(x) = 0.5 x (1 + erf(x / sqrt 2));  d/dx = Phi(x) + x phi(x)
// gelu_tanh(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)
// silu(x) = x sigmoid(x);  d/dx = sig(x) (1 + x (1 - sig(x)))
template <Activation A, class T>
NORMLAB_INLINE T act_value_k(T x) {
  if constexpr (A == Activation::gelu_erf) {
    return T(0.5) * x * (T(1) + std::erf(x * T(0.70710678118654752440)));
  } else if constexpr (A == Activation::gelu_tanh) {
    const T k = T(0.79788456080286535588);
    const T u = k * (x + T(0.044715) * x * x * x);
    if constexpr (std::is_same_v<T, float>) {
      // 0.5 (1 + tanh u) = sigmoid(2u) = 1 / (1 + e^{-2u}): one exp, no cancellation.
      const T uc = select_bits(u > T(40), T(40), select_bits(u < T(-40), T(-40), u));
      return x / (T(1) + exp_fast(T(-2) * uc));
    } else {
      return T(0.5) * x * (T(1) + std::tanh(u));
    }
  } else {
    return x / (T(1) + exp_fast(-x));
  }
}

template <Activation A, class T>
NORMLAB_INLINE T act_grad_k(T x) {
  if constexpr (A == Activation::gelu_erf) {
    const T cdf = T(0.5) * (T(1) + std::erf(x * T(0.70710678118654752440)));
    const T pdf = std::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
    return cdf + x * pdf;
  } else if constexpr (A == Activation::gelu_tanh) {
    const T k = T(0.79788456080286535588);
    const T u = k * (x + T(0.044715) * x * x * x);
    const T du = k * (T(1) + T(3) * T(0.044715) * x * x);
    if constexpr (std::is_same_v<T, float>) {
      // With s = sigmoid(2u) = 1 / (1 + E), E = e^{-2u}, 1 - s = E s:  0.5 (1 + tanh u) = s and
      // 0.5 (1 - tanh^2 u) = 2 s (1 - s); |u| <= 40 keeps E and 1 + E finite.
      const T uc = select_bits(u > T(40), T(40), select_bits(u < T(-40), T(-40), u));
      const T E = exp_fast(T(-2) * uc);
      const T s = T(1) / (T(1) + E);
      return s + T(2) * x * du * s * (E * s);
    } else {
      const T th = std::tanh(u);
      return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
    }
  } else {
    const T s = T(1) / (T(1) + exp_fast(-x));
    return s * (T(1) + x * (T(1) - s));
  }
}

// act(x) and act'(x) together, sharing the exponential (float); double: the two functions above.
template <Activation A, class T>
NORMLAB_INLINE void act_value_grad_k(T x, T& value, T& grad) {
  if constexpr (std::is_same_v<T, float> && A == Activation::silu) {
    const T s = T(1) / (T(1) + exp_fast(-x));
    value = x * s;
    grad = s * (T(1) + x * (T(1) - s));
  } else if constexpr (std::is_same_v<T, float> && A == Activation::gelu_tanh) {
    const T k = T(0.79788456080286535588);
    const T u = k * (x + T(0.044715) * x * x * x);
    const T du = k * (T(1) + T(3) * T(0.044715) * x * x);
    const T uc = select_bits(u > T(40), T(40), select_bits(u < T(-40), T(-40), u));
    const T E = exp_fast(T(-2) * uc);
    const T s = T(1) / (T(1) + E);
    value = x * s;
    grad = s + T(2) * x * du * s * (E * s);
  } else {
    value = act_value_k<A>(x);
    grad = act_grad_k<A>(x);
  }
}

// The plain references (library exp/tanh/erf in any precision).
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

// Calls f.template operator()<A>() with the activation as a compile-time constant.
template <class F>
inline void with_activation(Activation a, F&& f) {
  switch (a) {
    case Activation::gelu_erf:
      f.template operator()<Activation::gelu_erf>();
      break;
    case Activation::gelu_tanh:
      f.template operator()<Activation::gelu_tanh>();
      break;
    case Activation::silu:
      f.template operator()<Activation::silu>();
      break;
  }
}

// The loops of activation_forward / activation_backward over one thread's span of elements.
template <Activation A, class T>
NORMLAB_WIDE_MAP void activation_forward_span(T* y, const T* x, long n) {
#pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = act_value_k<A>(x[i]);
}
template <Activation A, class T>
NORMLAB_WIDE_MAP void activation_backward_span(T* dx, const T* dy, const T* x, long n,
                                               Accum accum) {
  if (accum == Accum::add) {
#pragma omp simd
    for (long i = 0; i < n; ++i) dx[i] += dy[i] * act_grad_k<A>(x[i]);
  } else {
#pragma omp simd
    for (long i = 0; i < n; ++i) dx[i] = dy[i] * act_grad_k<A>(x[i]);
  }
}

// y = act(x) over n elements (overwrites y)
template <class T>
void activation_forward(Activation a, T* y, const T* x, long n) {
  with_activation(a, [&]<Activation A>() {
    parallel_for(n, 16384,
                 [&](long b, long e) { activation_forward_span<A>(y + b, x + b, e - b); });
  });
}

// dx (+)= dy * act'(x)   (Accum::add adds, ::overwrite replaces; ops/accum.h). With
// Accum::overwrite, dx may alias dy.
template <class T>
void activation_backward(Activation a, T* dx, const T* dy, const T* x, long n, Accum accum) {
  with_activation(a, [&]<Activation A>() {
    parallel_for(n, 16384, [&](long b, long e) {
      activation_backward_span<A>(dx + b, dy + b, x + b, e - b, accum);
    });
  });
}

}  // namespace normlab::ops
