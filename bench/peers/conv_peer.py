#!/usr/bin/python3
"""PyTorch peer for bench/conv_bench.cc: the same LeNet and AlexNet conv layers, one thread.

Times conv2d forward, the input gradient and the weight gradient separately, each through
aten::convolution_backward with one output requested (what autograd calls), in PyTorch's
native NCHW layout, float32, no bias. Prints the median of several timed repeats per
figure in ms, and GFLOP/s at 2 * M * K * N per pass (as conv_bench.cc counts them).

Run the peer at its best, as bench notes ask (tcmalloc preloaded, one thread, same
OPENBLAS_CORETYPE as the troupe run):

  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/bin/python3 bench/peers/conv_peer.py

--layers=lenet_conv2,alexnet_conv1 times only the layers named. With --json it prints one
JSON object instead of the table (bench/run.sh reads it):
{"torch": ..., "threads": 1, "results": [{"layer", "op", "ms", "gflops"}, ...]}.

Needs PyTorch (Debian: apt-get install python3-torch); never installed by CI or set-up
scripts.
"""
import json
import statistics
import sys
import time

import torch

# name, batch, in_h, in_w, in_c, k, out_c, stride, padding (TensorFlow's name)
LAYERS = [
    ("lenet_conv1", 64, 28, 28, 1, 5, 6, 1, "SAME"),
    ("lenet_conv2", 64, 14, 14, 6, 5, 16, 1, "VALID"),
    ("cnn_conv1", 64, 28, 28, 1, 5, 32, 1, "SAME"),
    ("cnn_conv2", 64, 14, 14, 32, 5, 64, 1, "SAME"),
    ("alexnet_conv1", 16, 224, 224, 3, 11, 64, 4, "VALID"),
    ("alexnet_conv2", 16, 27, 27, 64, 5, 192, 1, "SAME"),
    ("alexnet_conv3", 16, 13, 13, 192, 3, 384, 1, "SAME"),
]


def time_ms(fn, min_seconds=0.5, repeats=5):
    """Median over `repeats` of the mean time of fn() in a loop of at least min_seconds/repeats."""
    fn()  # warm up (allocator, oneDNN primitive caches)
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-6)
    loops = max(1, int(min_seconds / repeats / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            fn()
        samples.append((time.perf_counter() - start) / loops * 1e3)
    return statistics.median(samples)


def main():
    as_json = "--json" in sys.argv[1:]
    min_seconds = 0.5
    layers = set()  # empty: every layer
    for arg in sys.argv[1:]:
        if arg.startswith("--seconds="):
            min_seconds = float(arg.split("=", 1)[1])
        elif arg.startswith("--layers="):
            layers = set(arg.split("=", 1)[1].split(","))
    rows = []
    torch.set_num_threads(1)
    torch.manual_seed(42)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"mkldnn {torch.backends.mkldnn.is_available()}", file=sys.stderr)
    if not as_json:
        print(f"{'layer':<16} {'op':<22} {'ms':>9} {'GFLOP/s':>9}")
    for name, batch, in_h, in_w, in_c, k, out_c, stride, padding in LAYERS:
        if layers and name not in layers:
            continue
        # SAME with an odd kernel at stride 1 is symmetric padding (k - 1) / 2.
        pad = (k - 1) // 2 if padding == "SAME" else 0
        x = torch.rand(batch, in_c, in_h, in_w) * 2 - 1
        w = torch.rand(out_c, in_c, k, k) * 2 - 1
        y = torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)
        dy = torch.rand_like(y) * 2 - 1
        out_h, out_w = y.shape[2], y.shape[3]
        flops = 2.0 * batch * out_h * out_w * k * k * in_c * out_c

        def backward(mask):
            return torch.ops.aten.convolution_backward(
                dy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1, mask)

        with torch.no_grad():
            runs = [
                ("conv2d", lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)),
                ("backprop_input", lambda: backward([True, False, False])),
                ("backprop_filter", lambda: backward([False, True, False])),
            ]
            for op, fn in runs:
                ms = time_ms(fn, min_seconds)
                rows.append({"layer": name, "op": op, "ms": ms, "gflops": flops / ms / 1e6})
                if not as_json:
                    print(f"{name:<16} {op:<22} {ms:9.2f} {flops / ms / 1e6:9.1f}")
    if as_json:
        print(json.dumps({"torch": torch.__version__, "threads": 1, "results": rows}))


if __name__ == "__main__":
    main()
