// The rows of norm operations (model/norm_ops.h): each kind's traits and its op behind one
// signature.
#include "model/norm_ops.h"

#include <iterator>

#include "normlab/errors.h"
#include "ops/dyt.h"
#include "ops/layernorm.h"
#include "ops/ngpt.h"
#include "ops/rmsnorm.h"

namespace normlab {

NormTraits norm_traits(NormKind k) {
  switch (k) {
    // {bias, alpha, shift, row_stats}
    case NormKind::layernorm: return {true, false, false, true};
    case NormKind::rmsnorm: return {false, false, false, true};
    case NormKind::dyt: return {true, true, false, false};
    case NormKind::derf: return {true, true, true, false};
    case NormKind::l2: return {false, false, false, true, false};
  }
  NL_CHECK(false, "norm kind {} has no traits", static_cast<int>(k));
  return {};
}

NormKind qk_norm_kind(QKNormKind k) {
  switch (k) {
    case QKNormKind::rmsnorm: return NormKind::rmsnorm;
    case QKNormKind::layernorm: return NormKind::layernorm;
    case QKNormKind::dyt: return NormKind::dyt;
    case QKNormKind::derf: return NormKind::derf;
    case QKNormKind::none: break;
  }
  NL_CHECK(false, "model.qk_norm = {} has no norm kind", static_cast<int>(k));
  return NormKind::rmsnorm;
}

namespace {

template <class T>
struct LayerNormRow {
  static void forward(T* out, T* mean, T* rstd, const T* x, const NormParams<T>& p, long rows,
                      int width) {
    ops::layernorm_forward(out, mean, rstd, x, p.w, p.b, static_cast<int>(rows), width, p.eps,
                           p.g0);
  }
  static void backward(T* dx, const NormGrads<T>& g, const T* dout, const T* x, const T* mean,
                       const T* rstd, const NormParams<T>& p, long rows, int width,
                       ops::Accum accum, const T* base) {
    ops::layernorm_backward(dx, g.dw, g.db, dout, x, mean, rstd, p.w, static_cast<int>(rows),
                            width, p.g0, accum, base);
  }
};

template <class T>
struct RmsNormRow {
  static void forward(T* out, T*, T* rstd, const T* x, const NormParams<T>& p, long rows,
                      int width) {
    ops::rmsnorm_forward(out, rstd, x, p.w, static_cast<int>(rows), width, p.eps, p.g0);
  }
  static void backward(T* dx, const NormGrads<T>& g, const T* dout, const T* x, const T*,
                       const T* rstd, const NormParams<T>& p, long rows, int width,
                       ops::Accum accum, const T* base) {
    ops::rmsnorm_backward(dx, g.dw, dout, x, rstd, p.w, static_cast<int>(rows), width, p.g0,
                          accum, base);
  }
};

// DyT (phi = tanh, no shift) and Derf (phi = erf with the site's shift).
template <class T, ops::Squash F>
struct DytRow {
  static T shift(const NormParams<T>& p) { return p.shift ? *p.shift : T(0); }
  static void forward(T* out, T*, T*, const T* x, const NormParams<T>& p, long rows, int width) {
    ops::dyt_forward(F, out, x, *p.alpha, shift(p), p.w, p.b, static_cast<int>(rows), width, p.g0);
  }
  static void backward(T* dx, const NormGrads<T>& g, const T* dout, const T* x, const T*,
                       const T*, const NormParams<T>& p, long rows, int width, ops::Accum accum,
                       const T* base) {
    ops::dyt_backward(F, dx, g.dw, g.db, g.dalpha, g.dshift, dout, x, *p.alpha, shift(p), p.w,
                      static_cast<int>(rows), width, p.g0, accum, base);
  }
  static double saturated(const T* x, const NormParams<T>& p, long n) {
    return ops::dyt_saturated_fraction(F, x, n, *p.alpha, shift(p));
  }
};

// nGPT's unit-sphere projection x / ||x|| (ops/ngpt.h): no parameters; rstd keeps 1 / ||x||.
template <class T>
struct L2Row {
  static void forward(T* out, T*, T* rstd, const T* x, const NormParams<T>&, long rows,
                      int width) {
    ops::l2norm_forward(out, rstd, x, rows, width);
  }
  static void backward(T* dx, const NormGrads<T>&, const T* dout, const T* x, const T*,
                       const T* rstd, const NormParams<T>&, long rows, int width, ops::Accum accum,
                       const T* base) {
    ops::l2norm_backward(dx, dout, x, rstd, rows, width, accum, base);
  }
};

template <class R, class T>
constexpr NormOps<T> row_of() {
  if constexpr (requires { &R::saturated; })
    return {&R::forward, &R::backward, &R::saturated};
  else
    return {&R::forward, &R::backward, nullptr};
}

}  // namespace

template <class T>
const NormOps<T>& norm_ops(NormKind k) {
  // In NormKind's order.
  static const NormOps<T> rows[] = {
      row_of<LayerNormRow<T>, T>(),
      row_of<RmsNormRow<T>, T>(),
      row_of<DytRow<T, ops::Squash::tanh>, T>(),
      row_of<DytRow<T, ops::Squash::erf>, T>(),
      row_of<L2Row<T>, T>(),
  };
  static_assert(std::size(rows) == static_cast<std::size_t>(NormKind::l2) + 1,
                "one row of norm operations per NormKind");
  const auto i = static_cast<std::size_t>(k);
  NL_CHECK(i < std::size(rows), "norm kind {} has no operations", i);
  return rows[i];
}

template const NormOps<float>& norm_ops<float>(NormKind);
template const NormOps<double>& norm_ops<double>(NormKind);

}  // namespace normlab
