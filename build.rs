// Links the binary against the libtorch that torch-sys built with, so it runs without
// LD_LIBRARY_PATH, and keeps libtorch_cuda linked when that libtorch has CUDA kernels
// (rustc links with --as-needed, which would otherwise drop it: nothing references it directly).
use std::path::Path;

fn main() {
    // MLX built against a shared libmlx (Linux, scripts/setup-mlx.sh): rpath to it as well.
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIBDIR");
    if let Ok(lib) = std::env::var("DEP_MLX_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    }
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
    if Path::new(&lib).join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
