// net/dist/data_parallel.cpp — model-level collectives (net/dist/data_parallel.h).
#include "net/dist/data_parallel.h"

#include "engine/autograd.h"

namespace ember::net::dist {
namespace {

// The tensor the communicator works on: t itself, or a copy where the communicator needs it.
Tensor comm_buffer(Comm& comm, const Tensor& t) { return t.to(comm.buffer_device()); }

}  // namespace

void all_reduce_tensor(Comm& comm, Tensor& t, ReduceOp op, const std::string& what) {
  if (comm.world_size() == 1) return;
  Tensor buf = comm_buffer(comm, t);
  all_reduce_now(comm, buf, op, what);
  if (!buf.same(t)) t.copy_from(buf);
}

void broadcast_tensor(Comm& comm, Tensor& t, int root, const std::string& what) {
  if (comm.world_size() == 1) return;
  Tensor buf = comm_buffer(comm, t);
  broadcast_now(comm, buf, root, what);
  if (!buf.same(t)) t.copy_from(buf);
}

void broadcast_module(Comm& comm, Module& model) {
  NoGradGuard no_grad;
  for (auto& [name, t] : model.state()) broadcast_tensor(comm, *t, 0, "rank 0's " + name);
}

void average_buffers(Comm& comm, Module& model) {
  NoGradGuard no_grad;
  for (NamedBuffer& b : model.named_buffers())
    if (is_floating(b.tensor->dtype())) all_reduce_tensor(comm, *b.tensor, ReduceOp::average, b.name);
}

std::vector<double> sum_over_ranks(Comm& comm, const std::vector<double>& values) {
  if (comm.world_size() == 1) return values;
  Tensor t = Tensor::from_vector(values, Shape{int64_t(values.size())}, DType::f64);
  all_reduce_tensor(comm, t, ReduceOp::sum, "metrics");
  return t.to_double_vector();
}

std::shared_ptr<const ops::BatchNormSync> make_batch_norm_sync(Comm& comm) {
  auto s = std::make_shared<ops::BatchNormSync>();
  s->rank = comm.rank();
  s->world = comm.world_size();
  Comm* c = &comm;
  s->all_reduce_sum = [c](Tensor& t) { all_reduce_tensor(*c, t, ReduceOp::sum, "sync batch norm"); };
  return s;
}

}  // namespace ember::net::dist
