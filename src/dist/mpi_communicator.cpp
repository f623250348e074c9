// The MPI communicator (Open MPI). Compiled only with -DNORMLAB_MPI=ON.
#ifdef NORMLAB_WITH_MPI
#include <mpi.h>

#include <algorithm>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "normlab/communicator.h"
#include "normlab/errors.h"

namespace normlab {

namespace {

class Mpi final : public Communicator {
 public:
  Mpi() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
  }
  ~Mpi() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }

  void allreduce_sum(float* buf, long n, long bucket, bool deterministic) override {
    bucket = std::max<long>(1, bucket);
    if (!deterministic) {
      for (long off = 0; off < n; off += bucket) {
        const int c = static_cast<int>(std::min(bucket, n - off));
        check(MPI_Allreduce(MPI_IN_PLACE, buf + off, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "allreduce");
      }
      return;
    }
    // Rank-ordered: gather every rank's bucket, then add them up in rank order on every rank.
    gather_.resize(static_cast<std::size_t>(bucket) * world_);
    for (long off = 0; off < n; off += bucket) {
      const int c = static_cast<int>(std::min(bucket, n - off));
      check(MPI_Allgather(buf + off, c, MPI_FLOAT, gather_.data(), c, MPI_FLOAT, MPI_COMM_WORLD), "allgather");
      for (int i = 0; i < c; ++i) {
        float s = gather_[i];
        for (int r = 1; r < world_; ++r) s += gather_[static_cast<long>(r) * c + i];
        buf[off + i] = s;
      }
    }
  }
  void allreduce_sum(double* buf, long n) override {
    check(MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "allreduce");
  }
  void broadcast(void* buf, long bytes, int root) override {
    check(MPI_Bcast(buf, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }
  std::string describe() const override {
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    MPI_Get_processor_name(name, &len);
    std::vector<char> all(static_cast<std::size_t>(MPI_MAX_PROCESSOR_NAME) * world_);
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                  MPI_CHAR, MPI_COMM_WORLD);
    std::set<std::string> hosts;
    for (int r = 0; r < world_; ++r) hosts.insert(std::string(all.data() + static_cast<long>(r) * MPI_MAX_PROCESSOR_NAME));
    return fmt::format("world: {} MPI ranks on {} host(s) [{}]{}", world_, hosts.size(),
                       fmt::join(hosts, ", "), launcher_environment());
  }

 private:
  static void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) throw Error(fmt::format("[mpi] {} failed (code {})", what, rc));
  }
  int rank_ = 0, world_ = 1;
  std::vector<float> gather_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<Mpi>(); }

}  // namespace normlab
#endif
