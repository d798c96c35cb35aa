// CUDA: the device's error record (cuda_common.cuh), read where the host waits for the device anyway, so that a
// check found on the device costs no synchronisation of its own: a training step waits only where it needs a value.
#include "kernels/cuda/cuda_common.cuh"

DeviceReadback *cuda_readback(Backend *be) {
    CudaImpl *im = cuda_impl(be);
    if (!im->readback) {
        CHECK_CUDA(cudaMalloc(&im->readback, sizeof(DeviceReadback)));
        CHECK_CUDA(cudaMemsetAsync(im->readback, 0, sizeof(DeviceReadback), 0));
    }
    return im->readback;
}

int32_t *cuda_device_status(Backend *be) {
    DeviceReadback *rb = cuda_readback(be);
    cuda_impl(be)->status_unread = true;
    return rb->status;
}

void cuda_device_status_die(Backend *be, const int32_t status[4]) {
    cuda_impl(be)->status_unread = false;
    switch (status[0]) {
    case DEVICE_STATUS_OK: return;
    case DEVICE_STATUS_PLAN_BAD_ID:
        die("routing_plan: expert id %d at entry %d is outside [0, %d)", status[1], status[2], status[3]);
    case DEVICE_STATUS_XENT_BAD_TARGET: die("cross_entropy: a target is outside [-1, %d)", status[1]);
    case DEVICE_STATUS_EMBED_BAD_TOKEN:
        die("embedding_backward: negative token id %d at position %d", status[1], status[2]);
    case DEVICE_STATUS_CAPACITY_BAD_ID: die("capacity_drop: expert id %d is not in [0, %d)", status[1], status[3]);
    default: die("cuda backend: unknown device status %d (internal error)", status[0]);
    }
}

void cuda_device_status_check(Backend *be) {
    CudaImpl *im = cuda_impl(be);
    if (!im->status_unread) return;
    int32_t status[4];
    CHECK_CUDA(cudaMemcpy(status, im->readback->status, sizeof status, cudaMemcpyDeviceToHost));
    cuda_host_waited(be);
#ifdef CUDA_EMULATION
    if (emu::dry_run()) status[0] = DEVICE_STATUS_OK; // nothing ran (cuda_emu_launch_log.cpp)
#endif
    cuda_device_status_die(be, status);
}
