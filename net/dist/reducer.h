// net/dist/reducer.h — gradient buckets for data-parallel training
// (PyTorch DDP's Reducer): gradients are averaged across ranks while
// backward is still running.
//
// The parameters that require grad are packed, in reverse registration
// order (roughly the order backward produces their gradients), into flat
// buckets of one dtype each: the first bucket of each dtype small
// (first_bucket_bytes, so communication starts early), the rest up to
// bucket_bytes. Buckets are numbered by when they are expected to fill.
// A post-accumulate-grad hook on each parameter copies its gradient into
// its bucket and points .grad at that slice; when a bucket is full it is
// handed to Comm::all_reduce (average), strictly in bucket order so every
// rank issues the same sequence. finish() (after backward) sends what is
// left, treating parameters that got no gradient as zero, and waits: the
// optimizer then reads averaged gradients, identical on every rank.
//
// Where the Comm's buffers live elsewhere (TCP with GPU gradients), each
// bucket is staged through a copy there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/dist/comm.h"
#include "net/module.h"

namespace ember::net::dist {

struct ReducerOptions {
  size_t bucket_bytes = 25u << 20;       // --bucket-size-mb (DDP's bucket_cap_mb)
  size_t first_bucket_bytes = 1u << 20;  // DDP's first bucket (never more than bucket_bytes)
};

class Reducer {
 public:
  // Installs the hooks on the parameters (which must not be replaced while
  // the reducer lives: build it after any f16/bf16 conversion).
  Reducer(Comm& comm, const std::vector<NamedParameter>& params, const ReducerOptions& options = {});
  ~Reducer();  // removes the hooks
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Before each backward.
  void prepare();
  // After backward: sends the buckets not yet sent, waits for all; the
  // parameters' .grad hold the averages.
  void finish();

  struct Stats {
    int64_t steps = 0;
    double comm_seconds = 0;     // time the collectives ran
    double exposed_seconds = 0;  // time finish() waited for them
    double hidden_share() const { return comm_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / comm_seconds) : 0.0; }
  };
  const Stats& stats() const { return stats_; }
  void reset_stats() { stats_ = Stats(); }
  // "4 buckets (f32: 1.0, 25.0, 25.0, 4.1 MiB)"
  std::string describe() const;
  size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Slot {
    Tensor* param;
    std::string name;
    int bucket;
    int64_t offset;  // elements into the bucket
    bool ready = false;
  };
  struct Bucket {
    DType dtype;
    Device device;
    int64_t numel = 0;
    std::vector<int> slots;
    Tensor flat;   // on the parameters' device
    Tensor host;   // staging copy where the Comm's buffers live elsewhere (TCP with GPU gradients)
    int pending = 0;
    bool launched = false;
    std::shared_ptr<Work> work;
  };
  void on_gradient(int slot);
  void launch_ready();
  void launch(int bucket);

  Comm& comm_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  int next_launch_ = 0;
  bool in_step_ = false;
  Stats stats_;
};

}  // namespace ember::net::dist
