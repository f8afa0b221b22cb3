// apps/training/evaluate.cpp — evaluation: top-1 and top-5 accuracy of a
// model (eval mode, no gradients) over one pass of a validation source,
// summed over data-parallel ranks; and the validation lines fit() prints at
// the end of each epoch (fit_run.h).
#include "apps/training/fit.h"
#include "apps/training/fit_run.h"
#include "apps/training/top_k.h"
#include "engine/autograd.h"
#include "net/dist/data_parallel.h"

namespace ember::apps {
namespace {

// Rows whose label is the best logit / among the 5 best (apps::in_top_k's
// rule), from one host copy of the logits.
struct TopHits {
  int64_t top1 = 0, top5 = 0;
};
TopHits count_top_hits(const Tensor& logits, const Tensor& labels_host) {
  const Tensor l = (logits.dtype() == DType::f32 ? logits : ops::cast(logits, DType::f32)).to(Device::cpu());
  const int64_t n = l.shape()[0], classes = l.shape()[1];
  const int64_t* y = labels_host.data<int64_t>();
  TopHits hits;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = l.data<float>() + i * classes;
    hits.top1 += in_top_k(row, classes, 1, y[i]);
    hits.top5 += in_top_k(row, classes, 5, y[i]);
  }
  return hits;
}

}  // namespace

Accuracy evaluate_accuracy(net::Module& model, BatchSource& source, Device device, net::dist::Comm* comm) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  BatchPrefetcher batches(source, device, true);  // the next batch uploads while this one runs
  batches.start_epoch(0);
  data::Batch b;
  DeviceBatch on_device;
  double correct = 0, top5 = 0, total = 0;
  int64_t classes = 0;
  while (batches.next(b, on_device)) {
    const Tensor logits = model(batches.uploads() ? on_device.images : b.images.to(device));
    const TopHits hits = count_top_hits(logits, b.labels);
    correct += double(hits.top1);
    top5 += double(hits.top5);
    total += double(b.size);
    classes = logits.shape()[1];
  }
  model.train(was_training);
  if (comm) {
    const auto sums = net::dist::sum_over_ranks(*comm, {correct, top5, total});
    correct = sums[0], top5 = sums[1], total = sums[2];
  }
  Accuracy a;
  a.samples = int64_t(total);
  a.classes = classes;
  if (total > 0) a.top1 = correct / total, a.top5 = top5 / total;
  return a;
}

double evaluate(net::Module& model, BatchSource& source, Device device, net::dist::Comm* comm) {
  return evaluate_accuracy(model, source, device, comm).top1;
}

double evaluate(net::Module& model, const data::ImageSet& set, int64_t batch_size, Device device) {
  data::BatchIterator::Options o;
  o.batch_size = batch_size;
  o.shuffle = false;
  data::BatchIterator it(set, o);
  IteratorSource source(it);
  return evaluate(model, source, device);
}

// The end of an epoch's validation (nothing without a validation set):
// MXNet's Validation-accuracy line, and top-5 above 5 classes.
Accuracy detail::FitRun::validate(int epoch) {
  Accuracy a;
  if (!val_) return a;
  a = evaluate_accuracy(model_, *val_, o_.device, comm_);
  result_.validation_accuracy = a.top1;
  std::fprintf(o_.log, "Epoch[%d] Validation-accuracy=%.6f\n", epoch, a.top1);
  if (a.classes > 5) {
    result_.validation_top5 = a.top5;
    std::fprintf(o_.log, "Epoch[%d] Validation-top_k_accuracy_5=%.6f\n", epoch, a.top5);
  }
  return a;
}

}  // namespace ember::apps
