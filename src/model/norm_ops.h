// The norm kinds as one table of operations (the norm as an interface, chosen once per site): a
// site's kind is fixed when the parameter table declares it (NormSlots::kind: model.norm for the
// residual and final sites, model.qk_norm for the QK sites), and the Transformer runs every site
// through norm_ops(kind).forward / .backward without testing the kind again. The traits of a kind
// say which parameters a site of it owns; the parameter table reads them. A new norm kind is one
// row here (its op file in src/ops/, its name in NormKind) and its gradient check.
#pragma once
#include "normlab/config.h"
#include "ops/accum.h"

namespace normlab {

// What a site of a kind owns: its gain w (width values, decay-free, init so that
// norm_gain_offset + w = 1) unless the kind has none (l2), and besides it:
struct NormTraits {
  bool bias;        // a bias of width values when model.norm_bias (LayerNorm, DyT, Derf)
  bool alpha;       // a learnable scalar alpha, `<site>.alpha` (DyT, Derf)
  bool shift;       // a learnable scalar shift s, `<site>.shift` (Derf)
  bool row_stats;   // the forward keeps per-row statistics (mean, rstd) for the backward
  bool gain = true; // a gain w (every kind but l2, nGPT's bare projection onto the unit sphere)
};
NormTraits norm_traits(NormKind k);

// The norm kind of the QK sites (qk_norm must not be none).
NormKind qk_norm_kind(QKNormKind k);

// A site's parameters (null where the site has none) and the config's eps and gain offset.
template <class T>
struct NormParams {
  const T *w = nullptr, *b = nullptr, *alpha = nullptr, *shift = nullptr;
  T eps = 0, g0 = 0;
};
// Their gradients (accumulated into; null where absent).
template <class T>
struct NormGrads {
  T *dw = nullptr, *db = nullptr, *dalpha = nullptr, *dshift = nullptr;
};

// One row of norm operations over `rows` rows of `width` values.
template <class T>
struct NormOps {
  // out = N(x); mean and rstd (rows) receive the statistics of kinds with row_stats.
  void (*forward)(T* out, T* mean, T* rstd, const T* x, const NormParams<T>& p, long rows,
                  int width);
  // dx (+)= through the norm (ops::Accum::add adds, ::overwrite replaces; with base (add only),
  // dx = base + ...); parameter gradients accumulate.
  void (*backward)(T* dx, const NormGrads<T>& g, const T* dout, const T* x, const T* mean,
                   const T* rstd, const NormParams<T>& p, long rows, int width, ops::Accum accum,
                   const T* base);
  // Diagnostics: the fraction of the n inputs x in the kind's saturated range (DyT, Derf:
  // ops::dyt_saturated_fraction); null for kinds that do not saturate.
  double (*saturated)(const T* x, const NormParams<T>& p, long n);
};
template <class T>
const NormOps<T>& norm_ops(NormKind k);

}  // namespace normlab
