// The Transformer's residual update, interpreted from the sublayer plan (model/plan.h), and the
// norm sites it runs: sublayer_forward runs a SublayerPlan, sublayer_backward replays it backwards.
#include <cmath>

#include "model/model_detail.h"
#include "model/norm_ops.h"
#include "model/transformer.h"
#include "ops/ngpt.h"
#include "ops/residual_scale.h"

namespace normlab {

using namespace model_detail;

namespace {
// Values of the branch scale a: one, or one per channel of the C.
int scale_width(const SublayerPlan& pl, int C) {
  return pl.branch_scale == BranchScale::channel ? C : 1;
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Norms: each site's kind was fixed by the parameter table (NormSlots::kind); its row of
// operations (model/norm_ops.h) runs it.

template <class T>
void Transformer<T>::norm_forward(NormCache& c, const NormSlots& s, const T* x, long rows,
                                  int width) {
  const NormParams<T> np{p(s.w), p(s.b), p(s.alpha), p(s.shift), static_cast<T>(cfg_.norm_eps),
                         static_cast<T>(cfg_.norm_gain_offset)};
  const NormOps<T>& op = norm_ops<T>(s.kind);
  op.forward(c.out, c.mean, c.rstd, x, np, rows, width);
  if (collect_stats_ && op.saturated)
    stats_.norm_saturated[spec_at(table_, s.alpha)] = op.saturated(x, np, rows * width);
}

template <class T>
void Transformer<T>::norm_backward(const NormCache& c, const NormSlots& s, const T* x,
                                   const T* dout, T* dx, long rows, int width, ops::Accum accum,
                                   const T* base) {
  const NormParams<T> np{p(s.w), p(s.b), p(s.alpha), p(s.shift), static_cast<T>(cfg_.norm_eps),
                         static_cast<T>(cfg_.norm_gain_offset)};
  const NormGrads<T> ng{g(s.w), g(s.b), g(s.alpha), g(s.shift)};
  norm_ops<T>(s.kind).backward(dx, ng, dout, x, c.mean, c.rstd, np, rows, width, accum, base);
}

// ---------------------------------------------------------------------------------------------
// The residual update, interpreted from the sublayer plan.

template <class T>
void Transformer<T>::sublayer_forward(const SublayerPlan& pl, const SublayerSlots& sl,
                                      SublayerActs& a, const T* x, T* y, bool attn, int l) {
  const long N = static_cast<long>(B_) * T_;
  const int C = cfg_.d_model;
  const T* u = x;
  if (pl.norm_in) {
    norm_forward(a.in, sl.norm_in, x, N, C);
    u = a.in.out;
  }
  if (attn)
    attn_forward(l, u, a.f);
  else
    mlp_forward(l, u, a.f);
  const T* gout = a.f;
  if (pl.norm_out) {
    norm_forward(a.out, sl.norm_out, a.f, N, C);
    gout = a.out.out;
  }
  const T alpha = static_cast<T>(pl.alpha);
  T* sum = pl.norm_after_add ? a.s : y;
  if (pl.branch_scale == BranchScale::none)
    scaled_add(sum, alpha, x, gout, N * C);
  else if (pl.branch_scale == BranchScale::lerp)
    ops::lerp_forward(sum, x, gout, p(sl.scale), static_cast<T>(pl.branch_scale_mult), N, C);
  else
    ops::residual_scale_forward(sum, alpha, x, gout, p(sl.scale), N, C, scale_width(pl, C));
  if (pl.norm_after_add) {
    NormCache post{y, a.post.mean, a.post.rstd};
    norm_forward(post, sl.norm_post, a.s, N, C);
  }
}

// Replays the plan backwards: dy -> ds (through N_post) -> dx = alpha ds, dg = a (.) ds (and
// da += the sum of ds (.) g) -> df (through N_out) -> du (through the branch) -> dx += (through
// N_in) du.  dx is overwritten.
template <class T>
void Transformer<T>::sublayer_backward(const SublayerPlan& pl, const SublayerSlots& sl,
                                       SublayerActs& a, const T* x, const T* dy, T* dx, bool attn,
                                       int l) {
  const long N = static_cast<long>(B_) * T_;
  const int C = cfg_.d_model;
  const T* ds = dy;
  if (pl.norm_after_add) {
    NormCache post{nullptr, a.post.mean, a.post.rstd};
    norm_backward(post, sl.norm_post, a.s, dy, d_post_in_, N, C, ops::Accum::overwrite);
    ds = d_post_in_;
  }
  const T alpha = static_cast<T>(pl.alpha);
  // dx = alpha ds, then dx += the gradient through N_in. At alpha = 1 with N_in, the norm's
  // backward writes ds + its gradient in one pass instead (the same values; ds is not written
  // in between).
  const bool fused = pl.norm_in && pl.alpha == 1.0;
  const bool lerp = pl.branch_scale == BranchScale::lerp;
  if (!fused && !lerp) scaled_add<T>(dx, alpha, ds, nullptr, N * C);
  const T* dg = ds;
  if (lerp) {
    // s = x + a (.) (g - x): dx = (1 - a) (.) ds, dg = a (.) ds (into the buffer as below).
    T* dg_buf = pl.norm_out ? d_branch_in_ : d_branch_out_;
    const T* gout = pl.norm_out ? a.out.out : a.f;
    NL_CHECK(!fused, "the lerp update reads x itself; its branch has no N_in");
    ops::lerp_backward<T>(dx, dg_buf, g(sl.scale), ds, x, gout, p(sl.scale),
                          static_cast<T>(pl.branch_scale_mult), N, C);
    dg = dg_buf;
  } else if (pl.branch_scale != BranchScale::none) {
    // dg goes where nothing else is live until it is read: d_branch_in_ when N_out reads it
    // (writing d_branch_out_), else d_branch_out_ (the branch's backward reads it as df).
    T* dg_buf = pl.norm_out ? d_branch_in_ : d_branch_out_;
    const T* gout = pl.norm_out ? a.out.out : a.f;
    ops::residual_scale_backward<T>(nullptr, dg_buf, g(sl.scale), ds, gout, p(sl.scale), alpha, N,
                                    C, scale_width(pl, C));
    dg = dg_buf;
  }
  const T* df = dg;
  if (pl.norm_out) {
    norm_backward(a.out, sl.norm_out, a.f, dg, d_branch_out_, N, C, ops::Accum::overwrite);
    df = d_branch_out_;
  }
  const T* u = pl.norm_in ? a.in.out : x;
  // Without norm_in the branch gradient lands on the residual stream directly (accumulating);
  // with it, it goes to d_branch_in_ (overwritten) and from there through the norm onto dx.
  T* du = pl.norm_in ? d_branch_in_ : dx;
  const ops::Accum du_accum = pl.norm_in ? ops::Accum::overwrite : ops::Accum::add;
  if (attn)
    attn_backward(l, u, df, du, du_accum);
  else
    mlp_backward(l, u, df, du, du_accum);
  if (pl.norm_in)
    norm_backward(a.in, sl.norm_in, x, d_branch_in_, dx, N, C, ops::Accum::add,
                  fused ? ds : nullptr);
}

// The members defined here (the class itself is instantiated in transformer.cpp).
#define NL_INSTANTIATE(T)                                                                       \
  template void Transformer<T>::norm_forward(NormCache&, const NormSlots&, const T*, long, int); \
  template void Transformer<T>::norm_backward(const NormCache&, const NormSlots&, const T*,     \
                                              const T*, T*, long, int, ops::Accum, const T*);   \
  template void Transformer<T>::sublayer_forward(const SublayerPlan&, const SublayerSlots&,     \
                                                 SublayerActs&, const T*, T*, bool, int);       \
  template void Transformer<T>::sublayer_backward(const SublayerPlan&, const SublayerSlots&,    \
                                                  SublayerActs&, const T*, const T*, T*, bool,  \
                                                  int);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab
