#!/usr/bin/env python3
"""PyTorch peer of bench/gpu_bench.cc on a GPU: the same MatMul 4096^3 and AlexNet
convolutions (batch 128, channels_last, float32, no bias), each forward, input gradient
and weight gradient, with cuDNN's benchmark mode on (its fastest algorithm), in exact
float32 and in TensorFloat-32. Times are medians of 20 runs timed with CUDA events after
warm-up. Prints one JSON object:
{"torch", "cudnn", "neg_chain_us_per_op", "kernels": [{"name", "float32_ms", "tf32_ms"}, ...]}
(neg_chain_us_per_op: eager PyTorch's time per op of 1000 one-element negations in a row,
beside bench_gpu's executor figure).

Run by tools/gpu_check.sh on the GPU machine (which has PyTorch); never by CI.
"""
import json
import statistics
import time

import torch

# name, batch, height, width, in_channels, filter, out_channels, stride, same (as gpu_bench.cc)
CONVS = [
    ("alexnet_conv1", 128, 224, 224, 3, 11, 64, 4, False),
    ("alexnet_conv2", 128, 27, 27, 64, 5, 192, 1, True),
    ("alexnet_conv3", 128, 13, 13, 192, 3, 384, 1, True),
    ("alexnet_conv4", 128, 13, 13, 384, 3, 256, 1, True),
]


def median_ms(fn, repeats=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def kernels():
    g = torch.Generator(device="cuda").manual_seed(5)
    out = {}
    a = torch.rand(4096, 4096, device="cuda", generator=g) * 2 - 1
    b = torch.rand(4096, 4096, device="cuda", generator=g) * 2 - 1
    out["MatMul 4096^3 float32"] = median_ms(lambda: torch.mm(a, b))
    for name, n, h, w, c, k, o, s, same in CONVS:
        x = (torch.rand(n, c, h, w, device="cuda", generator=g) * 2 - 1).to(memory_format=torch.channels_last)
        wt = (torch.rand(o, c, k, k, device="cuda", generator=g) * 0.2 - 0.1).to(memory_format=torch.channels_last)
        pad = (k - 1) // 2 if same else 0
        y = torch.nn.functional.conv2d(x, wt, stride=s, padding=pad)
        dy = (torch.rand(y.shape, device="cuda", generator=g) * 2 - 1).to(memory_format=torch.channels_last)
        conv = lambda: torch.nn.functional.conv2d(x, wt, stride=s, padding=pad)
        grad_input = lambda: torch.ops.aten.convolution_backward(
            dy, x, wt, None, [s, s], [pad, pad], [1, 1], False, [0, 0], 1, [True, False, False])
        grad_weight = lambda: torch.ops.aten.convolution_backward(
            dy, x, wt, None, [s, s], [pad, pad], [1, 1], False, [0, 0], 1, [False, True, False])
        out[f"{name} Conv2D"] = median_ms(conv)
        out[f"{name} Conv2DBackpropInput"] = median_ms(grad_input)
        out[f"{name} Conv2DBackpropFilter"] = median_ms(grad_weight)
    return out


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    # Newer PyTorch has per-backend precision settings as well; set them too, so that
    # "float32" means IEEE float32 arithmetic. (On 2026-12-04 PyTorch 2.11's float32
    # convolutions, with only the flags above set, ran faster than float32 arithmetic can.)
    for backend in (getattr(torch.backends.cudnn, "conv", None), getattr(torch.backends.cuda, "matmul", None)):
        if backend is not None and hasattr(backend, "fp32_precision"):
            backend.fp32_precision = "tf32" if on else "ieee"


def neg_chain_us_per_op(n=1000, repeats=20):
    """Eager PyTorch's cost per op: n one-element negations in a row, then a synchronize."""
    x = torch.ones(1, device="cuda")
    times = []
    for i in range(repeats + 3):
        torch.cuda.synchronize()
        start = time.perf_counter()
        y = x
        for _ in range(n):
            y = torch.neg(y)
        torch.cuda.synchronize()
        if i >= 3:
            times.append((time.perf_counter() - start) * 1e6 / n)
    return statistics.median(times)


def main():
    torch.backends.cudnn.benchmark = True
    results = {}
    for mode in ("float32", "tf32"):
        set_tf32(mode == "tf32")
        results[mode] = kernels()
    print(json.dumps({
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "neg_chain_us_per_op": neg_chain_us_per_op(),
        "kernels": [{"name": k, "float32_ms": results["float32"][k], "tf32_ms": results["tf32"][k]}
                    for k in results["float32"]],
    }))


if __name__ == "__main__":
    main()
