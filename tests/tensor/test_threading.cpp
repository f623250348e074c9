// The thread pool (tensor/threading.h): a job runs once on every thread and the caller returns only
// when all of them have finished, whatever state the waiting threads are in when the job comes or
// ends (pausing, yielding their core, or asleep on the futex).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "tensor/threading.h"

namespace normlab {
namespace {

// Restores the thread count a test found.
struct ThreadCountGuard {
  int saved = thread_count();
  ~ThreadCountGuard() { set_thread_count(saved); }
};

TEST(Threading, EveryThreadRunsEachJobOnceAndTheCallerWaitsForAll) {
  ThreadCountGuard guard;
  ASSERT_EQ(set_thread_count(2), 2);
  using us = std::chrono::microseconds;
  // Idle gaps before a job: within the pauses, within the yields (up to 50 us), past them (asleep).
  // Work in a thread: none, or longer than the yields, so that the other one (caller or worker)
  // goes to sleep before the job ends.
  for (const us gap : {us(0), us(20), us(300), us(3000)})
    for (int slow : {-1, 0, 1}) {
      std::this_thread::sleep_for(gap);
      std::atomic<int> runs[2] = {0, 0};
      std::atomic<bool> done[2] = {false, false};
      std::atomic<int> team = 0;
      parallel_team([&](int tid, int nth) {
        team = nth;
        ASSERT_GE(tid, 0);
        ASSERT_LT(tid, 2);
        ++runs[tid];
        if (tid == slow) std::this_thread::sleep_for(us(2000));
        done[tid] = true;
      });
      SCOPED_TRACE(testing::Message() << "gap " << gap.count() << " us, slow thread " << slow);
      EXPECT_EQ(team.load(), 2);
      for (int t = 0; t < 2; ++t) {
        EXPECT_EQ(runs[t].load(), 1) << "thread " << t;
        EXPECT_TRUE(done[t].load()) << "thread " << t << " had not finished when the job returned";
      }
    }
}

TEST(Threading, ParallelForCoversTheRangeOnceAfterIdleGaps) {
  ThreadCountGuard guard;
  set_thread_count(2);
  const long n = 100000;
  std::vector<std::atomic<int>> seen(n);
  for (const int gap_us : {0, 30, 500, 2000}) {
    std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    for (auto& s : seen) s = 0;
    parallel_for(n, 1000, [&](long b, long e) {
      for (long i = b; i < e; ++i) ++seen[i];
    });
    long wrong = 0;
    for (const auto& s : seen) wrong += s.load() != 1;
    EXPECT_EQ(wrong, 0) << "indices not visited exactly once after a gap of " << gap_us << " us";
  }
}

}  // namespace
}  // namespace normlab
