// ops/multi_tensor.h — many parameters in one launch: the plan of a
// multi-tensor optimizer step (ops/kernels.h's MultiTensorSlice and
// MultiTensorChunk) and the ops that run it. net/sgd.h builds the slices
// from its flat buffers and the parameters' gradients.
//
// The plan lives in the device's memory. Building it is host work only; it
// is uploaded again only when a slice changed (a gradient at another
// address, a parameter without a gradient this step, a new lr multiplier),
// and an upload does not wait for the device (cuda/host_staging.h). With
// the caching allocator a training step's gradients come back at the same
// addresses, so a steady run uploads its plan once.
#pragma once
#include <vector>

#include "engine/tensor.h"
#include "ops/kernels.h"

namespace ember::ops {

class MultiTensorPlan {
 public:
  explicit MultiTensorPlan(Device device = Device::cpu()) : device_(device) {}

  // Makes `slices` the plan, split into chunks of at most kMultiTensorChunk
  // elements. Every slice needs n > 0, grad, grad32 and weight; grad_dtype
  // f32, f16 or bf16; half_dtype f16 or bf16 where half is set.
  void set(const std::vector<MultiTensorSlice>& slices);

  Device device() const { return device_; }
  int64_t num_chunks() const { return num_chunks_; }
  const std::vector<MultiTensorSlice>& slices() const { return slices_; }
  // The tables on the device (valid until the next set()).
  const MultiTensorSlice* device_slices() const;
  const MultiTensorChunk* device_chunks() const;
  int64_t uploads() const { return uploads_; }  // how many times set() sent a new table

 private:
  Device device_;
  std::vector<MultiTensorSlice> slices_;
  int64_t num_chunks_ = 0;
  Tensor table_;  // u8: the slices, then the chunks
  int64_t uploads_ = 0;
};

// The loss scaler's device state (ops/kernels.h's LossScaleState): f32
// [kLossScaleStateSize] on `device`, holding `scale` and zero counts.
Tensor loss_scale_state(double scale, Device device);

// The three kernels of a multi-tensor step (ops/kernels.h), on the plan's
// device; `state` is a loss_scale_state() there.
void unscale_gradients(const MultiTensorPlan& plan, Tensor& state);
// state == nullptr: never skipped. hyper: f32 [2] (lr, momentum) on the
// plan's device, read in place of lr and momentum (CUDA graph replays), or nullptr.
void multi_tensor_sgd(const MultiTensorPlan& plan, double lr, double momentum, bool nesterov, const Tensor* state,
                      const Tensor* hyper = nullptr);
void loss_scale_update(Tensor& state, const LossScaleParams& p);

}  // namespace ember::ops
