// net/dist/data_parallel.h — what the training loop does around the
// gradient reducer (net/dist/reducer.h) in a data-parallel run: start every
// rank from rank 0's weights, average the batch-norm running statistics,
// sum metrics, and wire --sync-bn to the communicator. Device tensors are
// staged through the host when the communicator takes host buffers (TCP).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "net/dist/comm.h"
#include "net/module.h"
#include "ops/ops.h"

namespace ember::net::dist {

// Blocking, in place, for a tensor on any device.
void all_reduce_tensor(Comm& comm, Tensor& t, ReduceOp op, const std::string& what);
void broadcast_tensor(Comm& comm, Tensor& t, int root, const std::string& what);

// Every parameter and buffer from rank 0, so all ranks start identical.
void broadcast_module(Comm& comm, Module& model);
// Floating-point buffers (batch-norm running mean and variance) averaged
// across ranks: each rank saw only its own batches.
void average_buffers(Comm& comm, Module& model);
// Element-wise sums across ranks (metrics: samples, correct, loss).
std::vector<double> sum_over_ranks(Comm& comm, const std::vector<double>& values);
// The batch-norm synchronisation of --sync-bn (net::set_sync_batch_norm).
std::shared_ptr<const ops::BatchNormSync> make_batch_norm_sync(Comm& comm);

}  // namespace ember::net::dist
