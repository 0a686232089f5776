//! CUDA graphs through libtorch's own `at::cuda::CUDAGraph`, by way of the C++ shim
//! `csrc/cuda_graph.cpp` (compiled by build.rs when the libtorch linked has CUDA kernels, which
//! sets `cfg(voxtral_cuda_graphs)`). A graph records the kernels one run of a closure queues
//! and replays them with one launch: the closure's inputs and outputs must be tensors that
//! outlive the graph and are written in place between replays, and nothing in it may wait
//! for the device (no reads to the host, no uploads). Builds without CUDA have the same API,
//! every capture failing with [`GraphError::NotBuilt`].

/// Why a graph was not captured or not replayed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("this build has no CUDA graphs (its libtorch has no CUDA kernels)")]
    NotBuilt,
    #[error("CUDA graphs need a CUDA device; the model runs on {0}")]
    NotCuda(String),
    #[error("CUDA graph: {0}")]
    Cuda(String),
    /// The captured closure failed (a libtorch error, raised as a panic by `tch`).
    #[error("CUDA graph capture: {0}")]
    Body(String),
}

/// Whether this build has the shim.
pub const BUILT: bool = cfg!(voxtral_cuda_graphs);

/// The text of a caught panic.
#[cfg(any(voxtral_cuda_graphs, test))]
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic without a message".into())
}

/// Runs `body`, a panic in it turned into [`GraphError::Body`].
#[cfg(any(voxtral_cuda_graphs, test))]
fn caught(body: &mut dyn FnMut()) -> Result<(), GraphError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
        .map_err(|panic| GraphError::Body(panic_message(panic.as_ref())))
}

#[cfg(voxtral_cuda_graphs)]
mod shim {
    use std::ffi::{c_char, c_int, c_longlong, c_void};

    extern "C" {
        pub fn vt_cuda_graph_last_error() -> *const c_char;
        pub fn vt_cuda_graph_new(device: c_int, out: *mut *mut c_void) -> c_int;
        pub fn vt_cuda_graph_free(graph: *mut c_void);
        pub fn vt_cuda_graph_enter_side_stream(graph: *mut c_void) -> c_int;
        pub fn vt_cuda_graph_leave_side_stream(graph: *mut c_void) -> c_int;
        pub fn vt_cuda_graph_capture_begin(graph: *mut c_void, share: *const c_void) -> c_int;
        pub fn vt_cuda_graph_capture_end(graph: *mut c_void) -> c_int;
        pub fn vt_cuda_graph_replay(graph: *mut c_void) -> c_int;
        pub fn vt_cuda_reserved_bytes(device: c_int, out: *mut c_longlong) -> c_int;
        pub fn vt_cuda_capability(device: c_int, major: *mut c_int, minor: *mut c_int) -> c_int;
    }

    /// The shim's status as a result: its message on failure.
    pub fn check(status: c_int) -> Result<(), super::GraphError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: the shim returns a NUL-terminated string that this thread's next call
        // replaces; it is copied out at once.
        let message = unsafe { std::ffi::CStr::from_ptr(vt_cuda_graph_last_error()) };
        Err(super::GraphError::Cuda(
            message.to_string_lossy().into_owned(),
        ))
    }
}

/// A captured graph. Replays queue on the thread's current CUDA stream.
pub struct CudaGraph {
    #[cfg(voxtral_cuda_graphs)]
    raw: std::ptr::NonNull<std::ffi::c_void>,
    #[cfg(not(voxtral_cuda_graphs))]
    never: std::convert::Infallible,
}

impl CudaGraph {
    /// Runs `body` `warmups` times on a side stream (libraries allocate their workspaces and
    /// pick their kernels on a first run, which a capture must not see), then captures one
    /// more run. With `share`, the capture allocates from that graph's memory pool: graphs
    /// replayed one at a time may share one. On failure the device is back on its stream
    /// and nothing stays captured.
    #[cfg(voxtral_cuda_graphs)]
    pub fn capture(
        device: usize,
        share: Option<&CudaGraph>,
        warmups: usize,
        body: &mut dyn FnMut(),
    ) -> Result<CudaGraph, GraphError> {
        use shim::*;
        let device = std::ffi::c_int::try_from(device)
            .map_err(|_| GraphError::Cuda(format!("device index {device}")))?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` receives a graph this function owns from here on (`graph`).
        check(unsafe { vt_cuda_graph_new(device, &mut raw) })?;
        let raw = std::ptr::NonNull::new(raw)
            .ok_or_else(|| GraphError::Cuda("no graph allocated".into()))?;
        let graph = CudaGraph { raw };
        let p = graph.raw.as_ptr();
        // SAFETY (every call below): `p` is the live graph created above; `share`, when
        // given, another live graph.
        check(unsafe { vt_cuda_graph_enter_side_stream(p) })?;
        let captured = (|| {
            for _ in 0..warmups {
                caught(body)?;
            }
            let share = share.map_or(std::ptr::null(), |g| g.raw.as_ptr().cast_const());
            check(unsafe { vt_cuda_graph_capture_begin(p, share) })?;
            let ran = caught(body);
            // The capture is ended whatever happened in it: the stream leaves capture mode.
            let ended = check(unsafe { vt_cuda_graph_capture_end(p) });
            ran.and(ended)
        })();
        let left = check(unsafe { vt_cuda_graph_leave_side_stream(p) });
        captured.and(left).map(|()| graph)
    }

    #[cfg(not(voxtral_cuda_graphs))]
    pub fn capture(
        _device: usize,
        _share: Option<&CudaGraph>,
        _warmups: usize,
        _body: &mut dyn FnMut(),
    ) -> Result<CudaGraph, GraphError> {
        Err(GraphError::NotBuilt)
    }

    /// Queues the captured kernels again: they read and write the tensors they did when
    /// captured.
    pub fn replay(&self) -> Result<(), GraphError> {
        #[cfg(voxtral_cuda_graphs)]
        // SAFETY: `raw` is a live, captured graph.
        return shim::check(unsafe { shim::vt_cuda_graph_replay(self.raw.as_ptr()) });
        #[cfg(not(voxtral_cuda_graphs))]
        match self.never {}
    }
}

#[cfg(voxtral_cuda_graphs)]
impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: the graph is owned here and freed once.
        unsafe { shim::vt_cuda_graph_free(self.raw.as_ptr()) }
    }
}

/// CUDA device `device`'s compute capability (major, minor), from the shim (the only code
/// here that reads a device's properties).
pub fn compute_capability(device: usize) -> Result<(u32, u32), GraphError> {
    #[cfg(voxtral_cuda_graphs)]
    {
        let index = std::ffi::c_int::try_from(device)
            .map_err(|_| GraphError::Cuda(format!("device index {device}")))?;
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes one integer to each of `major` and `minor`.
        shim::check(unsafe { shim::vt_cuda_capability(index, &mut major, &mut minor) })?;
        Ok((major.max(0) as u32, minor.max(0) as u32))
    }
    #[cfg(not(voxtral_cuda_graphs))]
    {
        let _ = device;
        Err(GraphError::NotBuilt)
    }
}

/// Bytes libtorch's caching allocator holds on CUDA device `device`, graph pools included:
/// the difference across captures is the memory they keep.
pub fn reserved_bytes(device: usize) -> Result<u64, GraphError> {
    #[cfg(voxtral_cuda_graphs)]
    {
        let index = std::ffi::c_int::try_from(device)
            .map_err(|_| GraphError::Cuda(format!("device index {device}")))?;
        let mut bytes = 0;
        // SAFETY: writes one integer to `bytes`.
        shim::check(unsafe { shim::vt_cuda_reserved_bytes(index, &mut bytes) })?;
        Ok(u64::try_from(bytes).unwrap_or(0))
    }
    #[cfg(not(voxtral_cuda_graphs))]
    {
        let _ = device;
        Err(GraphError::NotBuilt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_without_cuda_says_so() {
        if BUILT {
            return;
        }
        let mut ran = false;
        let err = CudaGraph::capture(0, None, 1, &mut || ran = true)
            .err()
            .expect("no graphs without the shim");
        assert_eq!(err, GraphError::NotBuilt);
        assert!(err.to_string().contains("no CUDA graphs"), "{err}");
        assert!(!ran, "nothing runs when nothing can be captured");
        assert_eq!(reserved_bytes(0), Err(GraphError::NotBuilt));
        assert_eq!(compute_capability(0), Err(GraphError::NotBuilt));
    }

    #[test]
    fn a_failing_body_is_an_error_not_a_panic() {
        let err = caught(&mut || panic!("no kernel for this")).unwrap_err();
        assert_eq!(err, GraphError::Body("no kernel for this".into()));
        assert!(caught(&mut || {}).is_ok());
    }
}
