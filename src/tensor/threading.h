// One threading policy for the whole process: OpenMP (our kernels) and OpenBLAS (matrix products)
// get the same number of threads, by default the number of cores this process may use.
#pragma once

namespace normlab {

// n <= 0: all available cores. Returns the count in effect.
int set_thread_count(int n);
int available_cores();

}  // namespace normlab
