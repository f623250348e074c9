#include "tensor/threading.h"

#include <omp.h>
#include <sched.h>

#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define NORMLAB_PAUSE() _mm_pause()
#else
#define NORMLAB_PAUSE() ((void)0)
#endif

extern "C" void openblas_set_num_threads(int);

namespace normlab {

namespace {

// Pause instructions a waiting thread spins before it sleeps on a futex: a few microseconds. More
// costs more than it saves where threads share a core (SMT siblings, a VM's vCPUs, other
// processes): on this project's 2-vCPU benchmark machine a step of config a took 7% to 40% longer
// with 4000 pauses than with 0 or 100, which measured the same.
constexpr int kSpin = 128;

thread_local bool t_in_job = false;

class Pool {
 public:
  void resize(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    if (n == nth_ && static_cast<int>(workers_.size()) == n - 1) return;
    stop_workers();
    nth_ = n;
    stop_.store(false);
    // A worker starts from the epoch of its creation, so that a job published before the thread
    // gets to run is not missed.
    const std::uint32_t start = epoch_.load(std::memory_order_acquire);
    for (int t = 1; t < n; ++t) workers_.emplace_back([this, t, start] { worker(t, start); });
  }

  void run(detail::TeamFn fn, void* ctx) {
    std::lock_guard<std::mutex> lock(mu_);  // one job at a time (jobs from several caller threads)
    fn_ = fn;
    ctx_ = ctx;
    const int nw = static_cast<int>(workers_.size());
    pending_.store(nw, std::memory_order_relaxed);
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    std::exception_ptr err;
    t_in_job = true;
    try {
      fn(ctx, 0, nth_);
    } catch (...) {
      err = std::current_exception();
    }
    t_in_job = false;
    for (int v, i = 0; (v = pending_.load(std::memory_order_acquire)) != 0;) {
      if (i < kSpin) {
        ++i;
        NORMLAB_PAUSE();
      } else {
        pending_.wait(v, std::memory_order_acquire);
      }
    }
    if (err) std::rethrow_exception(err);
  }

 private:
  void worker(int tid, std::uint32_t seen) {
    for (;;) {
      std::uint32_t e;
      for (int i = 0; (e = epoch_.load(std::memory_order_acquire)) == seen; ++i) {
        if (i < kSpin)
          NORMLAB_PAUSE();
        else
          epoch_.wait(seen, std::memory_order_acquire);
      }
      seen = e;
      if (stop_.load(std::memory_order_acquire)) return;
      t_in_job = true;
      fn_(ctx_, tid, nth_);  // kernels do not throw
      t_in_job = false;
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  void stop_workers() {
    if (workers_.empty()) return;
    stop_.store(true, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex mu_;
  std::vector<std::thread> workers_;
  int nth_ = 1;
  std::atomic<std::uint32_t> epoch_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  detail::TeamFn fn_ = nullptr;
  void* ctx_ = nullptr;
};

// Never destroyed: a kernel running from another object's static destructor must still find it;
// its threads sleep on a futex until the process ends.
Pool& pool() {
  static Pool* p = new Pool;
  return *p;
}

std::atomic<int> g_threads{0};  // 0: not set yet (all available cores on first use)

}  // namespace

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int set_thread_count(int n) {
  if (n <= 0) n = available_cores();
  g_threads.store(n);
  pool().resize(n);
  // Nothing in normlab opens OpenMP parallel regions; keep any other user of OpenMP consistent.
  omp_set_num_threads(n);
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  // float products run on normlab's own kernel (gemm.h); the BLAS serves double (tests) only,
  // single-threaded, so that it never starts a second pool of threads.
  openblas_set_num_threads(1);
#else
  openblas_set_num_threads(n);
#endif
  return n;
}

int thread_count() {
  int n = g_threads.load(std::memory_order_relaxed);
  if (n == 0) n = set_thread_count(0);
  return n;
}

bool in_parallel() { return t_in_job; }

namespace detail {

void run_team(TeamFn fn, void* ctx) {
  if (t_in_job || thread_count() == 1) {
    fn(ctx, 0, 1);
    return;
  }
  pool().run(fn, ctx);
}

}  // namespace detail

}  // namespace normlab
