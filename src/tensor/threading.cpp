#include "tensor/threading.h"

#include <omp.h>
#include <sched.h>

#include <chrono>
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

// Pause instructions a waiting thread spins first (then it yields, below): a few microseconds. More
// costs more than it saves where threads share a core (SMT siblings, a VM's vCPUs, other
// processes): on this project's 2-vCPU benchmark machine a step of config a took 7% to 40% longer
// with 4000 pauses than with 0 or 100, which measured the same.
constexpr int kSpin = 128;
// Then the waiting thread yields its core (sched_yield) until kYieldFor has passed since it began
// to wait, and only then sleeps: waking a sleeping thread costs tens of microseconds in a VM, while
// a yield returns at once when nothing else wants the core and hands it over when something does.
// Intel AMX machine (2026-12-03), 2 threads, 3 alternated runs of 8 steps against sleeping right
// after the pauses: b 809-845 -> 758-786 ms per step, a 505-527 -> 491-510, c 706-725 -> 689-721
// (losses bitwise the same); b's GEMM shapes alone 296-298 -> 315-317 GFLOP/s (OpenBLAS 332-340
// in the same runs). 200 us measured the same on b and c, but 2% slower than 50 with two
// processes of 2 threads on the 2 cores, where 50 matched the old policy (986 against 991 ms);
// 4 threads on 2 cores: 547 against 550 ms.
constexpr auto kYieldFor = std::chrono::microseconds(50);

// One step of a wait that began at t0 after i steps: true while it should keep polling (a pause,
// or a yield of the core), false when it is time to sleep on the futex.
inline bool keep_polling(int& i, std::chrono::steady_clock::time_point& t0) {
  if (i < kSpin) {
    if (i++ == 0) t0 = std::chrono::steady_clock::now();
    NORMLAB_PAUSE();
    return true;
  }
  if (std::chrono::steady_clock::now() - t0 >= kYieldFor) return false;
  sched_yield();
  return true;
}

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
    std::chrono::steady_clock::time_point t0;
    for (int v, i = 0; (v = pending_.load(std::memory_order_acquire)) != 0;)
      if (!keep_polling(i, t0)) pending_.wait(v, std::memory_order_acquire);
    if (err) std::rethrow_exception(err);
  }

 private:
  void worker(int tid, std::uint32_t seen) {
    for (;;) {
      std::uint32_t e;
      std::chrono::steady_clock::time_point t0;
      for (int i = 0; (e = epoch_.load(std::memory_order_acquire)) == seen;)
        if (!keep_polling(i, t0)) epoch_.wait(seen, std::memory_order_acquire);
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
