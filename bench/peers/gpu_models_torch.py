#!/usr/bin/python3
"""PyTorch on a GPU, the peer of bench_gpu's training steps (tools/gpu_check.sh): one
training step (forward, backward, plain SGD) of AlexNet at batch 128 with exactly the
layers of bench/peers/alexnet_peer.py (224x224x3 images, NCHW, cuDNN autotuned:
torch.backends.cudnn.benchmark), and of the LSTM language model of bench/peers/lstm_peer.py
with the full softmax (vocabulary 10,000, embedding and hidden 512, 20 steps, batch 32;
nn.LSTM runs cuDNN's fused LSTM). float32 (TF32 only when TROUPE_ALLOW_TF32=1, as troupe).

  python3 bench/peers/gpu_models_torch.py [--steps N] [--smoke] [--device cpu]

(--device cpu: the same steps on the CPU, to check the script where there is no GPU.)

Prints one JSON object: {"torch": ..., "device": ..., "tf32": ..., "models": [{"name",
"ms_per_step", "items_per_s", "samples_ms"}]}; ms per step is the median over samples of
`--steps` synchronized steps each, after three warm-up steps. Exits 77 without a GPU.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alexnet_peer import alexnet  # noqa: E402
from lstm_peer import LanguageModel, log_uniform  # noqa: E402


def timed(step, steps, sync, samples=5):
    for _ in range(3):
        step()
    sync()
    out = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        out.append((time.perf_counter() - start) / steps * 1e3)
    return statistics.median(out), out


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=10, help="steps per timed sample (default 10)")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, to check the script runs")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print(json.dumps({"skipped": "no CUDA device"}))
        sys.exit(77)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    tf32 = os.environ.get("TROUPE_ALLOW_TF32") == "1"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device(args.device)
    torch.manual_seed(0)
    models = []

    batch, image, fc, classes = (2, 100, 64, 10) if args.smoke else (128, 224, 4096, 1000)
    model = alexnet(image, fc, classes).to(dev)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.rand(batch, 3, image, image, device=dev)
    labels = torch.randint(0, classes, (batch,), device=dev)

    def alexnet_step():
        sgd.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(images), labels).backward()
        sgd.step()
    ms, samples = timed(alexnet_step, args.steps, sync)
    models.append({"name": f"alexnet_batch{batch}", "ms_per_step": ms, "items_per_s": batch / ms * 1e3,
                   "samples_ms": [round(x, 4) for x in samples]})

    vocab, hidden, lm_batch, unroll = (50, 8, 2, 3) if args.smoke else (10000, 512, 32, 20)
    lm = LanguageModel(vocab, hidden, sampled=False).to(dev)
    lm_sgd = torch.optim.SGD(lm.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(42)
    ids = log_uniform(unroll * lm_batch, vocab, gen).reshape(unroll, lm_batch).to(dev)
    words = log_uniform(unroll * lm_batch, vocab, gen).to(dev)

    def lm_step():
        lm_sgd.zero_grad(set_to_none=True)
        lm(ids, words).backward()
        lm_sgd.step()
    ms, samples = timed(lm_step, args.steps, sync)
    models.append({"name": "lstm_lm_full", "ms_per_step": ms, "items_per_s": unroll * lm_batch / ms * 1e3,
                   "samples_ms": [round(x, 4) for x in samples]})
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    print(json.dumps({"torch": torch.__version__, "device": name, "tf32": tf32,
                      "models": models}))


if __name__ == "__main__":
    main()
