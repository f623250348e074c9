// The data-parallel communicator: a small interface with a single-process implementation (always
// built) and an MPI one (built with -DNORMLAB_MPI=ON, used when the process was started by
// mpirun). The trainer sees only this interface; a Trainer can be given one (tests inject theirs).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace normlab {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Sums buf across ranks in place, in buckets of at most bucket elements (no second full-size
  // buffer). With deterministic, the sum is taken in rank order (rank 0 + rank 1 + ...) so the
  // result does not depend on the reduction algorithm or timing.
  virtual void allreduce_sum(float* buf, long n, long bucket, bool deterministic) = 0;
  virtual void allreduce_sum(double* buf, long n) = 0;
  virtual void broadcast(void* buf, long bytes, int root) = 0;
  virtual void barrier() = 0;
  // One line describing the world (ranks, hosts, launcher variables).
  virtual std::string describe() const = 0;
  bool is_root() const { return rank() == 0; }
};

// The process-wide communicator: MPI when built with it and launched by an MPI launcher
// (OMPI_COMM_WORLD_SIZE or PMI_SIZE set), else a single process.
Communicator& world_communicator();

// For tests and tools: a fresh single-process communicator.
std::unique_ptr<Communicator> make_single_process_communicator();

// Environment variables of common launchers, read for information only: Open MPI's
// OMPI_COMM_WORLD_RANK/SIZE and the RANK/WORLD_SIZE pair of torchrun-style launchers.
std::string launcher_environment();

}  // namespace normlab
