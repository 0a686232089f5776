// CUDA graphs through libtorch's own at::cuda::CUDAGraph, and two facts of a device (its
// allocator's reserved bytes, its compute capability), for src/tensor/cuda_graph.rs.
// Compiled by build.rs only when the libtorch it links has CUDA kernels.
//
// Only c10's device-generic guards and events are used: CUDA's own (CUDAGuard) are inline and
// would call the CUDA runtime from here, which the binary does not link.
//
// Every function returns 0 on success and -1 on failure; the failure's message is then
// kept for this thread (vt_cuda_graph_last_error). No C++ exception crosses into Rust.

#include <ATen/cuda/CUDAGraph.h>
#include <cuda_runtime_api.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/core/Event.h>

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

// libtorch_cuda's own, declared here: its header (ATen/cuda/CUDAContextLight.h) pulls in
// cuBLAS's, which need CUDA C++ headers the wheels leave out.
namespace at::cuda {
cudaDeviceProp* getDeviceProperties(c10::DeviceIndex device);
}  // namespace at::cuda

namespace {

thread_local std::string last_error;

// A graph and the side stream it is captured on: capture may not run on the default
// stream, whose work every other stream would then wait for.
struct Graph {
  at::cuda::CUDAGraph graph;
  c10::DeviceIndex device;
  std::optional<c10::cuda::CUDAStream> side;
  std::optional<c10::cuda::CUDAStream> before;
};

template <typename F>
int guarded(F body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception";
  }
  return -1;
}

}  // namespace

extern "C" {

const char* vt_cuda_graph_last_error() { return last_error.c_str(); }

int vt_cuda_graph_new(int device, void** out) {
  *out = nullptr;
  return guarded([&] {
    auto index = static_cast<c10::DeviceIndex>(device);
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, index));
    *out = new Graph{at::cuda::CUDAGraph(), index, std::nullopt, std::nullopt};
  });
}

void vt_cuda_graph_free(void* graph) {
  try {
    delete static_cast<Graph*>(graph);
  } catch (...) {
    // A destructor that throws leaves nothing to recover.
  }
}

// Makes a side stream current, after everything already queued on the current stream: the
// warm-up runs and the capture that follow are queued there.
int vt_cuda_graph_enter_side_stream(void* graph) {
  return guarded([&] {
    auto* g = static_cast<Graph*>(graph);
    if (g->before) throw std::runtime_error("already on the side stream");
    auto before = c10::cuda::getCurrentCUDAStream(g->device);
    auto side = c10::cuda::getStreamFromPool(false, g->device);
    c10::Event ready(c10::DeviceType::CUDA);
    ready.record(before);
    ready.block(side);
    c10::cuda::setCurrentCUDAStream(side);
    g->before = before;
    g->side = side;
  });
}

// Back to the stream that was current, which waits for the side stream's work.
int vt_cuda_graph_leave_side_stream(void* graph) {
  return guarded([&] {
    auto* g = static_cast<Graph*>(graph);
    if (!g->before) throw std::runtime_error("not on the side stream");
    c10::Event done(c10::DeviceType::CUDA);
    done.record(*g->side);
    done.block(*g->before);
    c10::cuda::setCurrentCUDAStream(*g->before);
    g->before.reset();
  });
}

// Starts capturing what is queued on the current (side) stream. With `share`, the capture
// allocates from that graph's memory pool: graphs replayed one at a time can share one.
int vt_cuda_graph_capture_begin(void* graph, const void* share) {
  return guarded([&] {
    auto* g = static_cast<Graph*>(graph);
    if (!g->before) throw std::runtime_error("capture must run on the side stream");
    at::cuda::MempoolId_t pool = {0, 0};
    if (share != nullptr) {
      pool = const_cast<Graph*>(static_cast<const Graph*>(share))->graph.pool();
    }
    g->graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
  });
}

int vt_cuda_graph_capture_end(void* graph) {
  return guarded([&] { static_cast<Graph*>(graph)->graph.capture_end(); });
}

// Queues the graph on the current stream.
int vt_cuda_graph_replay(void* graph) {
  return guarded([&] {
    auto* g = static_cast<Graph*>(graph);
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::CUDA, g->device));
    g->graph.replay();
  });
}

// Bytes the caching allocator holds from the driver on `device` (graph pools included).
int vt_cuda_reserved_bytes(int device, long long* out) {
  *out = 0;
  return guarded([&] {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(
        static_cast<c10::DeviceIndex>(device));
    auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    *out = stats.reserved_bytes[aggregate].current;
  });
}

// The device's compute capability (the int4 product's kernel needs 8.0 or more).
int vt_cuda_capability(int device, int* major, int* minor) {
  *major = 0;
  *minor = 0;
  return guarded([&] {
    auto* properties = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device));
    *major = properties->major;
    *minor = properties->minor;
  });
}

}  // extern "C"
