#include "tensor/threading.h"

#include <omp.h>
#include <sched.h>

extern "C" void openblas_set_num_threads(int);

namespace normlab {

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
  return omp_get_num_procs();
}

int set_thread_count(int n) {
  if (n <= 0) n = available_cores();
  omp_set_num_threads(n);
#if defined(__AVX512F__)
  // float products run on normlab's own kernel inside OpenMP (gemm.h); the BLAS only serves double
  // (tests), single-threaded, so that no second pool of threads competes for the cores.
  openblas_set_num_threads(1);
#else
  openblas_set_num_threads(n);
#endif
  return n;
}

}  // namespace normlab
