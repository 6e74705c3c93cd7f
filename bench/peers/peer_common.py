"""Shared timing and reporting for the peers of bench/run.sh (PyTorch's here; TensorFlow's
tf_peer.py uses the timing and options without importing torch).

Each peer builds one model with PyTorch (Debian's 1.13, or the newest in bench/.venv),
makes its input batches once, and times full training steps (zero_grad, forward, loss,
backward, SGD step) at each thread count asked for (with PyTorch 2 also compiled and, for
convnets, channels-last: see run()), printing one JSON object:

  {"model": "mlp", "torch": "1.13.1", "tcmalloc": true, "interop_threads": 1,
   "items": "examples", "results": [{"threads": 1, "ms_per_step": 1.7, "items_per_s": 37600,
   "samples_ms": [...]}, ...], "best": {...}}

"best" is the thread count with the lowest median step time: the peer at its best, as
../shared/notes/baselines.md asks (with tcmalloc preloaded by the caller:
LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4; inter-op parallelism off and
OpenBLAS's threads set to the same count, so the thread count is the whole budget).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time


def parse_args(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--threads", default="1,2",
                        help="comma-separated intra-op thread counts to try (default 1,2)")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="time spent measuring each thread count (default 2)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed samples per thread count; the median is reported")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, to check the script runs")
    args = parser.parse_args()
    args.threads = [int(t) for t in args.threads.split(",") if t]
    return args


def pop_option(argv, name, default):
    """Removes `name VALUE` (or `name=VALUE`) from argv; returns (argv, VALUE or default)."""
    out, value, i = [], default, 0
    while i < len(argv):
        if argv[i] == name and i + 1 < len(argv):
            value = argv[i + 1]
            i += 2
            continue
        if argv[i].startswith(name + "="):
            value = argv[i][len(name) + 1:]
        else:
            out.append(argv[i])
        i += 1
    return out, value


def tcmalloc_loaded():
    try:
        with open("/proc/self/maps") as maps:
            return "tcmalloc" in maps.read()
    except OSError:
        return False


def set_blas_threads(threads):
    """Sets OpenBLAS's thread count (PyTorch's set_num_threads leaves it at the core count,
    so a 1-thread peer would still run 2-thread GEMMs that fight its own thread). Returns the
    library set, or None when PyTorch did not load OpenBLAS."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libopenblas" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            ctypes.CDLL(path).openblas_set_num_threads(threads)
            return path
        except (OSError, AttributeError):
            continue
    return None


def time_steps(step, seconds, repeats):
    """Median over `repeats` samples of the mean ms per step; each sample loops step()."""
    for _ in range(2):  # warm-up: allocator caches, oneDNN primitives
        step()
    start = time.perf_counter()
    step()
    once = max(time.perf_counter() - start, 1e-6)
    loops = max(1, int(seconds / repeats / once))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(loops):
            step()
        samples.append((time.perf_counter() - start) / loops * 1e3)
    return statistics.median(samples), samples


# How sgd_step builds the step being timed: PyTorch 2 is also tried compiled
# (torch.compile of the model) and, for convnets, in channels-last memory format; the
# fastest is kept and named in "threads" ("2+compile", "1+channels_last").
_variant = {"compile": False, "channels_last": False}


def variants_of(torch, conv):
    """The variants tried; TROUPE_PEER_NO_COMPILE=1 leaves out the compiled ones (bench/run.sh
    reruns a peer so when a compiled step crashed the whole process: Inductor's generated
    AlexNet kernels index out of bounds under ATEN_CPU_CAPABILITY=avx2 with PyTorch 2.15)."""
    torch2 = int(torch.__version__.split(".")[0]) >= 2
    compile_ok = torch2 and not os.environ.get("TROUPE_PEER_NO_COMPILE")
    out = [{"compile": False, "channels_last": False}]
    if compile_ok:
        out.append({"compile": True, "channels_last": False})
    if torch2 and conv:
        out.append({"compile": False, "channels_last": True})
        if compile_ok:
            out.append({"compile": True, "channels_last": True})
    return out


def run(model, items_name, items_per_step, make_step, args, extra=None, conv=False, sgd=True):
    """Times make_step() (a fresh step function per thread count and variant) and prints the
    JSON. `sgd`: make_step builds its step with sgd_step (so variants apply); `conv`: the
    model takes NCHW images (so channels-last is tried)."""
    global _variant
    import torch
    torch.set_num_interop_threads(1)
    results = []
    blas = None
    for threads in args.threads:
        torch.set_num_threads(threads)
        blas = set_blas_threads(threads) or blas
        for variant in (variants_of(torch, conv) if sgd else variants_of(torch, False)[:1]):
            _variant = variant
            name = str(threads) + "".join(f"+{k}" for k, on in variant.items() if on)
            torch.manual_seed(0)
            try:
                step = make_step()
                ms, samples = time_steps(step, args.seconds, args.repeats)
            except Exception as e:  # a variant this PyTorch cannot run (no compiler, ...)
                if variant["compile"] or variant["channels_last"]:
                    print(f"{model}: {name}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
                    continue
                raise
            results.append({"threads": threads if name == str(threads) else name, "ms_per_step": ms,
                            "items_per_s": items_per_step / ms * 1e3,
                            "samples_ms": [round(s, 4) for s in samples]})
            print(f"{model}: {name} thread(s) {ms:.2f} ms/step", file=sys.stderr)
    best = min(results, key=lambda r: r["ms_per_step"])
    out = {"model": model, "torch": torch.__version__, "tcmalloc": tcmalloc_loaded(),
           "interop_threads": 1, "openblas": blas, "items": items_name, "items_per_step": items_per_step,
           "results": results, "best": best}
    if extra:
        out.update(extra)
    print(json.dumps(out))


def sgd_step(model, optimizer, loss_fn, batches):
    """A step function cycling through `batches` (tuples of inputs, the last the target),
    built as run()'s current variant says."""
    import torch
    if _variant["channels_last"]:
        model = model.to(memory_format=torch.channels_last)
        batches = [tuple(t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in b)
                   for b in batches]
    if _variant["compile"]:
        model = torch.compile(model)
    state = {"next": 0}

    def step():
        *inputs, target = batches[state["next"]]
        state["next"] = (state["next"] + 1) % len(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(*inputs), target)
        loss.backward()
        optimizer.step()
    return step
