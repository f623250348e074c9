// The bf16 GEMM's dispatch (gemm_bf16.h): which kernels this CPU can run (CPUID, and for AMX
// Linux's grant of the tile registers), the kernel chosen for the process, and the entry points,
// which run it. The kernels live in gemm_bf16_amx.cpp, gemm_bf16_avx512.cpp (AVX512-BF16 and the
// portable kernel) and gemm_bf16_rounded.cpp (the float32 kernel on bf16-rounded copies).
#include "tensor/gemm_bf16.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "tensor/gemm_bf16_detail.h"

#if defined(NL_AMX)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace normlab {

#if defined(NL_AMX)
namespace {
// The CPU has AMX-TILE and AMX-BF16 (CPUID leaf 7, EDX bits 24 and 22), AVX-512 with BF16 for
// the packing and the stores, and the kernel grants this process the tile data
// (XFEATURE_XTILEDATA = 18).
bool amx_usable() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(d & (1u << 24)) || !(d & (1u << 22))) return false;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512bf16"))
    return false;
  constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
  return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}
}  // namespace
#endif

bool bf16_kernel_available(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::amx:
#if defined(NL_AMX)
    {
      static const bool has = amx_usable();
      return has;
    }
#else
      return false;
#endif
    case Bf16Kernel::avx512bf16:
#if defined(NL_BF16_X86)
    {
      static const bool has = __builtin_cpu_supports("avx512bf16");
      return has;
    }
#else
      return false;
#endif
    case Bf16Kernel::rounded_float:
    case Bf16Kernel::portable:
      return true;
  }
  return false;
}

const char* bf16_kernel_name(Bf16Kernel k) {
  switch (k) {
    case Bf16Kernel::amx:
      return "amx";
    case Bf16Kernel::avx512bf16:
      return "avx512bf16";
    case Bf16Kernel::rounded_float:
      return "float32 kernel on bf16-rounded copies";
    case Bf16Kernel::portable:
      return "portable";
  }
  return "?";
}

Bf16Kernel bf16_kernel_from_name(const char* name) {
  // in the enum's order
  static constexpr const char* kSpelling[] = {"amx", "avx512bf16", "rounded_float", "portable"};
  for (Bf16Kernel k : kBf16Kernels)
    if (std::strcmp(name, kSpelling[static_cast<int>(k)]) == 0 ||
        std::strcmp(name, bf16_kernel_name(k)) == 0)
      return k;
  throw std::invalid_argument(std::string("[gemm_bf16] unknown bf16 kernel '") + name +
                              "': expected amx, avx512bf16, rounded_float or portable");
}

namespace {
void require_available(Bf16Kernel k) {
  if (!bf16_kernel_available(k))
    throw std::invalid_argument(std::string("[gemm_bf16] the bf16 kernel '") + bf16_kernel_name(k) +
                                "' is not available on this CPU");
}

Bf16Kernel best_bf16_kernel() {
  for (Bf16Kernel k : {Bf16Kernel::amx, Bf16Kernel::avx512bf16})
    if (bf16_kernel_available(k)) return k;
  return Bf16Kernel::rounded_float;
}
std::atomic<int> chosen_kernel{-1};  // -1: the best available
}  // namespace

Bf16Kernel bf16_kernel() {
  const int k = chosen_kernel.load(std::memory_order_relaxed);
  return k < 0 ? best_bf16_kernel() : static_cast<Bf16Kernel>(k);
}

void set_bf16_kernel(Bf16Kernel k) {
  require_available(k);
  chosen_kernel.store(static_cast<int>(k), std::memory_order_relaxed);
}

void reset_bf16_kernel() { chosen_kernel.store(-1, std::memory_order_relaxed); }

bool bf16_hardware() {
  const Bf16Kernel k = best_bf16_kernel();
  return k == Bf16Kernel::amx || k == Bf16Kernel::avx512bf16;
}

void gemm_bf16_with(Bf16Kernel k, bool ta, bool tb, int M, int N, int K, float alpha,
                    const float* A, int lda, const float* B, int ldb, float beta, float* C,
                    int ldc) {
  if (M == 0 || N == 0) return;
  require_available(k);
  const gemm_detail::Problem p{ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc};
  switch (k) {
    case Bf16Kernel::amx:
#if defined(NL_AMX)
      gemm_bf16_detail::gemm_bf16_amx(p, true);
      return;
#else
      break;
#endif
    case Bf16Kernel::avx512bf16:
      gemm_bf16_detail::gemm_bf16_blocked(p, true, true);
      return;
    case Bf16Kernel::rounded_float:
      if (K <= 0)
        gemm<float>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // only scales C
      else
        gemm_bf16_detail::gemm_bf16_via_float(p);
      return;
    case Bf16Kernel::portable:
      gemm_bf16_detail::gemm_bf16_blocked(p, true, false);
      return;
  }
}

void gemm_bf16(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_bf16_with(bf16_kernel(), ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16_portable(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                        const float* B, int ldb, float beta, float* C, int ldc) {
  gemm_bf16_with(Bf16Kernel::portable, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace normlab
