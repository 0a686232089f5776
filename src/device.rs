//! `--device auto|cpu|cuda[:N]|mlx` and compute-dtype parsing.

#[cfg(feature = "mlx")]
use crate::tensor::mlx_backend::{MlxDevice, MlxTensor};
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{DType, Tensor};
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda(usize),
    /// The MLX backend (feature `mlx`): Metal when available, else the CPU.
    Mlx,
}

/// The backend and device a choice resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Tch(tch::Device),
    #[cfg(feature = "mlx")]
    Mlx(MlxDevice),
}

/// Work generic over the tensor backend, run by [`DeviceChoice::run`] on the backend a
/// choice resolves to.
pub trait OnBackend {
    type Output;
    fn run<T: Tensor>(self, device: &T::Device) -> Self::Output;
}

/// Whether `auto` picks MLX: builds with the `mlx` feature on Apple Silicon.
pub const AUTO_PREFERS_MLX: bool = cfg!(all(
    feature = "mlx",
    target_os = "macos",
    target_arch = "aarch64"
));

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            "mlx" => Ok(DeviceChoice::Mlx),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceChoice::Cuda)
                .ok_or_else(|| {
                    format!("unknown device {s:?}: expected auto, cpu, cuda, cuda:N or mlx")
                }),
        }
    }
}

impl DeviceChoice {
    /// Resolves the choice and runs `job` on that backend, on this thread, with libtorch's
    /// autograd off (thread-local: it must be the thread that runs the model) and, when
    /// `threads` > 0, that many libtorch CPU threads. `Err`: the device is not there.
    pub fn run<J: OnBackend>(self, threads: usize, job: J) -> Result<J::Output, String> {
        let _no_grad = tch::no_grad_guard();
        if threads > 0 {
            tch::set_num_threads(i32::try_from(threads).unwrap_or(i32::MAX));
        }
        Ok(match self.resolve()? {
            Backend::Tch(device) => job.run::<TchTensor>(&device),
            #[cfg(feature = "mlx")]
            Backend::Mlx(device) => job.run::<MlxTensor>(&device),
        })
    }

    /// The backend: MLX for `mlx`, and for `auto` on Apple Silicon builds with the `mlx`
    /// feature; libtorch otherwise (see `resolve_tch`).
    pub fn resolve(self) -> Result<Backend, String> {
        match self {
            DeviceChoice::Mlx => self.resolve_mlx_backend(),
            DeviceChoice::Auto if AUTO_PREFERS_MLX => self.resolve_mlx_backend(),
            _ => self.resolve_tch().map(Backend::Tch),
        }
    }

    #[cfg(feature = "mlx")]
    fn resolve_mlx_backend(self) -> Result<Backend, String> {
        self.resolve_mlx().map(Backend::Mlx)
    }

    #[cfg(not(feature = "mlx"))]
    fn resolve_mlx_backend(self) -> Result<Backend, String> {
        Err("device mlx: this build has no MLX backend (build with --features mlx)".into())
    }

    /// The MLX device: Metal when this MLX has it, else the CPU.
    #[cfg(feature = "mlx")]
    pub fn resolve_mlx(self) -> Result<MlxDevice, String> {
        match self {
            DeviceChoice::Mlx | DeviceChoice::Auto if MlxDevice::Gpu.is_available() => {
                Ok(MlxDevice::Gpu)
            }
            DeviceChoice::Mlx | DeviceChoice::Auto | DeviceChoice::Cpu => Ok(MlxDevice::Cpu),
            DeviceChoice::Cuda(_) => Err("MLX has no CUDA device here".into()),
        }
        .inspect(|d| d.make_default())
    }

    /// The libtorch device; `auto` prefers CUDA when this libtorch has it and a GPU is present.
    pub fn resolve_tch(self) -> Result<tch::Device, String> {
        let gpus = tch::Cuda::device_count() as usize;
        match self {
            DeviceChoice::Mlx => Err("device mlx selects the MLX backend, not libtorch".into()),
            DeviceChoice::Cpu => Ok(tch::Device::Cpu),
            DeviceChoice::Auto if gpus > 0 => Ok(tch::Device::Cuda(0)),
            DeviceChoice::Auto => Ok(tch::Device::Cpu),
            DeviceChoice::Cuda(n) if n < gpus => Ok(tch::Device::Cuda(n)),
            DeviceChoice::Cuda(n) => Err(format!(
                "device cuda:{n} is not available: this libtorch sees {gpus} CUDA device(s){}",
                if tch::Cuda::is_available() {
                    ""
                } else {
                    " (CPU-only libtorch or no GPU)"
                }
            )),
        }
    }
}

/// `--dtype bf16|f32`: the compute dtype.
pub fn parse_dtype(s: &str) -> Result<DType, String> {
    match s {
        "bf16" => Ok(DType::BF16),
        "f32" => Ok(DType::F32),
        _ => Err(format!("unknown dtype {s:?}: expected bf16 or f32")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices() {
        assert_eq!("auto".parse(), Ok(DeviceChoice::Auto));
        assert_eq!("cpu".parse(), Ok(DeviceChoice::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceChoice::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceChoice::Cuda(3)));
        assert!("gpu".parse::<DeviceChoice>().is_err());
        assert!("cuda:x".parse::<DeviceChoice>().is_err());
        assert_eq!("mlx".parse(), Ok(DeviceChoice::Mlx));
    }

    #[test]
    fn mlx_device_selects_the_mlx_backend() {
        let resolved = DeviceChoice::Mlx.resolve();
        #[cfg(feature = "mlx")]
        assert!(matches!(resolved, Ok(Backend::Mlx(_))), "{resolved:?}");
        #[cfg(not(feature = "mlx"))]
        assert!(resolved.is_err());
        assert!(DeviceChoice::Mlx.resolve_tch().is_err());
        let auto = DeviceChoice::Auto.resolve().unwrap();
        #[cfg(feature = "mlx")]
        assert_eq!(matches!(auto, Backend::Mlx(_)), AUTO_PREFERS_MLX);
        #[cfg(not(feature = "mlx"))]
        let Backend::Tch(_) = auto;
    }

    #[test]
    fn missing_cuda_device_is_an_error() {
        assert!(DeviceChoice::Cuda(99).resolve_tch().is_err());
        assert!(DeviceChoice::Cpu.resolve_tch().is_ok());
    }
}
