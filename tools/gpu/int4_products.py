# Times one product y = x @ W^T on a CUDA GPU with libtorch's own kernels: bf16 weights
# (cuBLAS), int4 weights (_weight_int4pack_mm, groups of 32: what `q4` runs on CUDA) and int8
# weights (_weight_int8pack_mm, one scale per row), each as 50 products replayed from one CUDA
# graph (kernel time, no launch overhead), for the published models' shapes at 1, 8 and 32 rows.
#   python3 tools/gpu/int4_products.py       (docs/quantization.md#on-cuda has the figures)
import torch

DEVICE = "cuda"
# [out, k] of Voxtral TTS's q/k/v-sized, fused w1/w3 and w2 products, and two Qwen3-TTS ones.
SHAPES = [(3072, 3072), (18432, 3072), (3072, 9216), (4096, 1024), (1024, 3072)]


def microseconds(product, reps=50, rounds=20):
    """The fastest of `rounds` replays of a graph of `reps` products, per product."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            product()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            product()
    graph.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1000 / reps)
    return best


def main():
    torch.manual_seed(0)
    print(torch.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())
    print("out k rows | bf16 us | int4 us | int8 us | GB/s read: bf16 int4")
    for out, k in SHAPES:
        bf16 = torch.randn(out, k, device=DEVICE, dtype=torch.bfloat16)
        values = torch.randint(0, 16, (out, k), device=DEVICE, dtype=torch.int32)
        nibbles = ((values[:, ::2] << 4) | values[:, 1::2]).to(torch.uint8)
        int4 = torch._convert_weight_to_int4pack(nibbles, 8)
        scales_and_zeros = torch.zeros(k // 32, out, 2, device=DEVICE, dtype=torch.bfloat16)
        scales_and_zeros[..., 0] = 0.01
        int8 = torch.randint(-127, 127, (out, k), device=DEVICE, dtype=torch.int8)
        row_scales = torch.rand(out, device=DEVICE, dtype=torch.bfloat16)
        for rows in [1, 8, 32]:
            x = torch.randn(rows, k, device=DEVICE, dtype=torch.bfloat16)
            t_bf16 = microseconds(lambda: torch.nn.functional.linear(x, bf16))
            t_int4 = microseconds(lambda: torch._weight_int4pack_mm(x, int4, 32, scales_and_zeros))
            t_int8 = microseconds(lambda: torch._weight_int8pack_mm(x, int8, row_scales))
            # int4: half a byte per weight, plus 4 bytes of scale and zero per 32.
            print(f"{out} {k} {rows} | {t_bf16:.1f} | {t_int4:.1f} | {t_int8:.1f} | "
                  f"{out * k * 2 / t_bf16 / 1e3:.0f} {out * k * 0.625 / t_int4 / 1e3:.0f}")


if __name__ == "__main__":
    main()
