#!/usr/bin/python3
"""PyTorch peer for bench/lenet_bench.cc, LeNet-5: conv 5x5x6 (pad 2) ReLU, max-pool 2,
conv 5x5x16 ReLU, max-pool 2, dense 400 -> 120 ReLU, dense 84 ReLU, dense 10; 28x28x1
images, batch 64,
softmax cross-entropy, plain SGD (lr 0.01). PyTorch's native NCHW layout (its fastest on
CPU); the shapes match troupe's NHWC graph layer for layer.

  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/bin/python3 bench/peers/lenet_peer.py

Prints JSON (see peer_common.py). Needs python3-torch; installed only by bench/run.sh.
"""
import torch
from torch import nn

import peer_common


def main():
    args = peer_common.parse_args(__doc__)
    batch = 2 if args.smoke else 64

    def make_step():
        model = nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(5 * 5 * 16, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, 10))
        batches = [(torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))) for _ in range(4)]
        return peer_common.sgd_step(model, torch.optim.SGD(model.parameters(), lr=0.01),
                                    nn.functional.cross_entropy, batches)

    peer_common.run("lenet", "images", batch, make_step, args, conv=True)


if __name__ == "__main__":
    main()
