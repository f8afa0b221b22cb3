// cuda/host_staging.h — host-to-device copies that do not wait for the
// device (cuda/host_sync.h: a training step never waits).
//
// cudaMemcpyAsync from pageable memory may wait for the stream, and from
// page-locked memory the source must stay untouched until the DMA has run,
// which the caller of a copy (a batch tensor about to be freed) cannot
// promise. So the bytes are first copied on the host into a ring of
// page-locked staging slots; the DMA from the slot is queued on the stream
// with an event behind it, and the caller may free or change its source as
// soon as the call returns. A slot is reused only once its event has
// completed: the host waits there (counted in staging_wait_count) only when
// it has run a whole ring of copies (two training steps' batches) ahead of
// the device, which bounds how far it runs ahead.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace ember::cuda {

// dst (device) = src (host, any memory), n bytes, queued on `stream`.
void copy_from_host_async(void* dst, const void* src, size_t n, cudaStream_t stream);

// Times a copy found its slot still in flight and waited for it.
int64_t staging_wait_count();

}  // namespace ember::cuda
