//! `--device auto|cpu|cuda[:N]` and compute-dtype parsing.

use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda(usize),
}

impl FromStr for DeviceChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceChoice::Auto),
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceChoice::Cuda)
                .ok_or_else(|| format!("unknown device {s:?}: expected auto, cpu, cuda or cuda:N")),
        }
    }
}

impl DeviceChoice {
    /// The libtorch device; `auto` prefers CUDA when this libtorch has it and a GPU is present.
    pub fn resolve_tch(self) -> Result<tch::Device, String> {
        let gpus = tch::Cuda::device_count() as usize;
        match self {
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
    }

    #[test]
    fn missing_cuda_device_is_an_error() {
        assert!(DeviceChoice::Cuda(99).resolve_tch().is_err());
        assert!(DeviceChoice::Cpu.resolve_tch().is_ok());
    }
}
