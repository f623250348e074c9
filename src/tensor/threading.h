// One threading policy for the whole process: normlab's own pool of threads. Every parallel kernel
// (the float matrix products of gemm.h, attention, norms, pointwise ops, the optimizer) runs on
// it, and the BLAS is kept single-threaded where normlab's sgemm is compiled in (AVX-512), so no
// two pools of threads ever compete for the cores.
//
// Why not OpenMP regions: with libgomp's default wait policy idle threads spin, and on a machine
// whose cores are shared (a VM, other processes) a spinning thread takes the time its partner
// needs; the fix, OMP_WAIT_POLICY=PASSIVE, cannot be set from inside the process. The pool's
// threads spin only briefly, then yield their core for a bounded time (kYieldFor in threading.cpp;
// a yield hands the core to any thread that wants it), then sleep on a futex, and work is handed
// out in chunks from a shared counter, so a thread the OS has put aside does not hold the others
// back. Chunk bounds depend only on the problem size, so reductions sum in a fixed order: results
// do not depend on which thread ran what.
#pragma once
#include <algorithm>
#include <atomic>
#include <type_traits>
#include <vector>

namespace normlab {

// n <= 0: all available cores. Returns the count in effect. The single place that sets threads.
int set_thread_count(int n);
// Threads in effect (set_thread_count, or all available cores by default).
int thread_count();
int available_cores();
// True on a thread that is running a parallel job (nested calls then run serially).
bool in_parallel();

namespace detail {
using TeamFn = void (*)(void* ctx, int tid, int nth);
void run_team(TeamFn fn, void* ctx);
}  // namespace detail

// Runs f(tid, nth) once on each of the nth threads (the caller is tid 0) and returns when all
// have finished. Inside a job, or with one thread, it runs f(0, 1) on the calling thread.
template <class F>
void parallel_team(F&& f) {
  detail::run_team(
      [](void* c, int t, int n) { (*static_cast<std::remove_reference_t<F>*>(c))(t, n); }, &f);
}

// The chunk cap: a parallel loop splits its range into at most kMaxChunks chunks, so per-chunk
// partial sums (reduced afterwards in chunk order) fit in a `double part[kMaxChunks]`.
inline constexpr long kMaxChunks = 64;

// Scratch of the calling thread that grows and is then reused (nothing allocated in steady
// state): Slots buffers of T for each Owner, a tag type naming the kernel that uses them, so that
// two kernels never share one. The workers of a parallel loop each get their own. Contents are
// undefined.
template <class Owner, int Slots, class T>
T* thread_scratch(int slot, long n) {
  thread_local std::vector<T> buf[Slots];
  if (static_cast<long>(buf[slot].size()) < n) buf[slot].resize(n);
  return buf[slot].data();
}

// The chunks of [0, n) that parallel_for uses: at most kMaxChunks, each at least `grain` long and,
// when grain >= 16, a multiple of 16 (whole cache lines of float) except the last.
struct Chunks {
  long n, size, count;
  Chunks(long n_, long grain) : n(n_) {
    const long g = std::max<long>(grain, 1), align = g >= 16 ? 16 : 1;
    count = std::max<long>(1, std::min<long>(kMaxChunks, n / g));
    size = std::max<long>(1, ((n + count - 1) / count + align - 1) / align * align);
    count = (n + size - 1) / size;
  }
  long begin(long c) const { return c * size; }
  long end(long c) const { return std::min(n, (c + 1) * size); }
};

// body(chunk, begin, end) for every chunk of [0, n), chunks claimed dynamically by the threads.
template <class F>
void parallel_chunks_indexed(const Chunks& ch, F&& body) {
  if (ch.count <= 1 || thread_count() == 1 || in_parallel()) {
    for (long c = 0; c < ch.count; ++c) body(c, ch.begin(c), ch.end(c));
    return;
  }
  std::atomic<long> next{0};
  parallel_team([&](int, int) {
    for (long c; (c = next.fetch_add(1, std::memory_order_relaxed)) < ch.count;)
      body(c, ch.begin(c), ch.end(c));
  });
}

// body(begin, end) over chunks of [0, n) of at least `grain` indices.
template <class F>
void parallel_for(long n, long grain, F&& body) {
  if (n <= 0) return;
  parallel_chunks_indexed(Chunks(n, grain), [&](long, long b, long e) { body(b, e); });
}

// body(c0, c1) over blocks of `block` columns of [0, C), in parallel when the reduction over
// `rows` rows is large enough (rows x C > 32768). Each block belongs to one task, so per-column
// sums over rows (parameter gradients) never race, and each column's sum runs over the rows in
// order whatever the thread count.
template <class F>
void parallel_column_blocks(long rows, int C, int block, F&& body) {
  const long nblocks = (C + block - 1) / block;
  parallel_for(nblocks, rows * C > 32768 ? 1 : nblocks, [&](long b0, long b1) {
    for (long cb = b0; cb < b1; ++cb) {
      const int c0 = static_cast<int>(cb * block);
      body(c0, c0 + block < C ? c0 + block : C);
    }
  });
}

}  // namespace normlab
