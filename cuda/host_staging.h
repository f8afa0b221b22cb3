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

// ---- copies ahead: the next batch uploaded while this step computes.
// copy_from_host_async on compute_stream() runs after everything queued
// before it, so the next batch's upload would wait for the current step.
// copy_from_host_ahead queues it on a second stream, the copy stream,
// behind an event recorded on the compute stream now (the destination block
// may have been used by earlier compute work: the caching allocator hands
// blocks back in compute-stream order). The copy overlaps whatever the
// compute stream runs after that point; finish_copies_ahead makes the
// compute stream wait for every copy ahead made so far, and must come
// before the destination is used.
//
// The order a training step takes: finish_copies_ahead() (this batch is
// in), copy_from_host_ahead(next batch), then the step's kernels. The next
// batch's copy then waits for the previous step only, and runs beside this one.
void copy_from_host_ahead(void* dst, const void* src, size_t n);
void finish_copies_ahead();
// The caching allocator calls this when it takes `block` back: a block that
// a copy ahead is still writing (its batch dropped unused: an interrupted
// epoch) would be handed to compute work racing with the copy, so the
// compute stream waits for the copies first. Nothing for other blocks.
void order_copies_ahead_before_reuse(const void* block);
// The second stream (created on first use).
cudaStream_t copy_stream();

}  // namespace ember::cuda
