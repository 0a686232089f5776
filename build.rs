// Links the binary against the libtorch that torch-sys built with, so it runs without
// LD_LIBRARY_PATH, and keeps libtorch_cuda linked when that libtorch has CUDA kernels
// (rustc links with --as-needed, which would otherwise drop it: nothing references it directly).
// With CUDA kernels, it also compiles the CUDA-graph shim (csrc/cuda_graph.cpp) against the
// headers of that libtorch and sets `cfg(voxtral_cuda_graphs)` for src/tensor/cuda_graph.rs.
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(voxtral_cuda_graphs)");
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
        build_cuda_graph_shim(Path::new(&lib));
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}

/// The shim includes libtorch's CUDA headers: the torch wheel's own (`torch/include`), the CUDA
/// runtime's next to it (`nvidia/cu13/include`), and the directories in VOXTRAL_CUDA_INCLUDE
/// (`:`-separated), where scripts/setup.sh puts the `crt/` headers the wheels leave out.
fn build_cuda_graph_shim(lib: &Path) {
    println!("cargo:rerun-if-changed=csrc/cuda_graph.cpp");
    println!("cargo:rerun-if-env-changed=VOXTRAL_CUDA_INCLUDE");
    let torch = lib.parent().expect("libtorch's lib folder has a parent");
    let mut includes: Vec<PathBuf> = vec![
        torch.join("include"),
        torch.join("include/torch/csrc/api/include"),
    ];
    if let Some(site) = torch.parent() {
        includes.push(site.join("nvidia/cu13/include"));
    }
    if let Ok(extra) = std::env::var("VOXTRAL_CUDA_INCLUDE") {
        includes.extend(std::env::split_paths(&extra));
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("csrc/cuda_graph.cpp")
        .includes(&includes)
        // libtorch's headers trip these; the shim's own code is small and reviewed.
        .flag_if_supported("-Wno-unused-parameter")
        .compile("voxtral_cuda_graph");
    println!("cargo:rustc-link-search=native={}", lib.display());
    for name in ["torch_cuda", "c10_cuda", "c10"] {
        println!("cargo:rustc-link-lib=dylib={name}");
    }
    println!("cargo:rustc-cfg=voxtral_cuda_graphs");
}
