// Counts the CUDA runtime calls through which a program's host waits for its GPU, for
// `scripts/gpu-check.sh`: loaded with LD_PRELOAD in front of libcudart, it passes every call
// on and prints the counts to stderr when the program exits.
//
// libtorch makes a blocking copy as cudaMemcpyAsync followed by cudaStreamSynchronize, and a
// non-blocking one (from page-locked memory) as cudaMemcpyAsync alone, so the stream
// synchronisations are the host's waits.
//
//   cc -shared -fPIC -O2 -o count_syncs.so tools/gpu/count_syncs.c -ldl
//   LD_PRELOAD=$PWD/count_syncs.so voxtral-tts synth ...
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

typedef int cuda_error;
typedef void *cuda_stream;
typedef void *cuda_event;

// cudaMemcpyKind
enum { HOST_TO_DEVICE = 1, DEVICE_TO_HOST = 2 };

static atomic_long stream_syncs, device_syncs, event_syncs, blocking_copies;
static atomic_long uploads, downloads, pinned_allocations;

// `real`: the next definition of `fn` (libcudart's), looked up once.
#define REAL(fn)                                                                               \
    static __typeof__(fn) *real;                                                               \
    if (!real) real = (__typeof__(fn) *)dlsym(RTLD_NEXT, #fn)

cuda_error cudaStreamSynchronize(cuda_stream stream) {
    REAL(cudaStreamSynchronize);
    atomic_fetch_add(&stream_syncs, 1);
    return real(stream);
}

cuda_error cudaDeviceSynchronize(void) {
    REAL(cudaDeviceSynchronize);
    atomic_fetch_add(&device_syncs, 1);
    return real();
}

cuda_error cudaEventSynchronize(cuda_event event) {
    REAL(cudaEventSynchronize);
    atomic_fetch_add(&event_syncs, 1);
    return real(event);
}

cuda_error cudaMemcpy(void *dst, const void *src, size_t bytes, int kind) {
    REAL(cudaMemcpy);
    atomic_fetch_add(&blocking_copies, 1);
    return real(dst, src, bytes, kind);
}

cuda_error cudaMemcpyAsync(void *dst, const void *src, size_t bytes, int kind,
                           cuda_stream stream) {
    REAL(cudaMemcpyAsync);
    if (kind == HOST_TO_DEVICE) atomic_fetch_add(&uploads, 1);
    if (kind == DEVICE_TO_HOST) atomic_fetch_add(&downloads, 1);
    return real(dst, src, bytes, kind, stream);
}

cuda_error cudaHostAlloc(void **ptr, size_t bytes, unsigned int flags) {
    REAL(cudaHostAlloc);
    atomic_fetch_add(&pinned_allocations, 1);
    return real(ptr, bytes, flags);
}

__attribute__((destructor)) static void report(void) {
    // Printed once, however many times the loader runs this.
    static atomic_flag printed = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&printed)) return;
    fprintf(stderr,
            "cuda-syncs: stream_syncs=%ld device_syncs=%ld event_syncs=%ld blocking_copies=%ld "
            "uploads=%ld downloads=%ld pinned_allocations=%ld\n",
            atomic_load(&stream_syncs), atomic_load(&device_syncs), atomic_load(&event_syncs),
            atomic_load(&blocking_copies), atomic_load(&uploads), atomic_load(&downloads),
            atomic_load(&pinned_allocations));
}
