#include "normlab/communicator.h"

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace normlab {

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  void allreduce_sum(float*, long, long, bool) override {}
  void allreduce_sum(double*, long) override {}
  void broadcast(void*, long, int) override {}
  void barrier() override {}
  std::string describe() const override {
    return fmt::format("world: 1 process (single-process communicator){}", launcher_environment());
  }
};

}  // namespace

std::string launcher_environment() {
  std::string s;
  for (const char* k : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "RANK", "WORLD_SIZE", "LOCAL_RANK"})
    if (const char* v = std::getenv(k)) s += fmt::format(" {}={}", k, v);
  return s.empty() ? "" : ";" + s;
}

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcess>();
}

#ifdef NORMLAB_WITH_MPI
std::unique_ptr<Communicator> make_mpi_communicator();  // mpi_communicator.cpp
#endif

Communicator& world_communicator() {
  static std::unique_ptr<Communicator> comm = [] {
#ifdef NORMLAB_WITH_MPI
    if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"))
      return make_mpi_communicator();
#endif
    return make_single_process_communicator();
  }();
  return *comm;
}

}  // namespace normlab
