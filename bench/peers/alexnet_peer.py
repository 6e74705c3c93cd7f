#!/usr/bin/python3
"""PyTorch peer for bench/alexnet_bench.cc: one training step (forward, backward, SGD
update) of AlexNet on 224x224x3 images, batch 16, with exactly troupe's shapes:

  conv 11x11/4 64 (no padding) -> 54x54, max-pool 3/2 -> 26, conv 5x5 192 (pad 2),
  max-pool 3/2 -> 12, conv 3x3 384, 256, 256 (pad 1), max-pool 3/2 -> 5,
  dense 6400 -> 4096 -> 4096 -> 1000, all ReLU, no LRN or dropout, softmax cross-entropy.

(torchvision's AlexNet pads conv1 by 2 and pools to 6x6; TensorFlow's VALID conv1 gives
the 5x5 map used here by both.) PyTorch's native NCHW layout.

  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/bin/python3 bench/peers/alexnet_peer.py

Prints JSON (see peer_common.py). Needs python3-torch; installed only by bench/run.sh.
"""
import torch
from torch import nn

import peer_common


def alexnet(image, fc, classes):
    """The model, NCHW, for images of `image` x `image` (bench/peers/gpu_models_torch.py
    trains it on a GPU too)."""
    side = (((image - 11) // 4 + 1 - 3) // 2 + 1 - 3) // 2 + 1
    side = (side - 3) // 2 + 1
    return nn.Sequential(
        nn.Conv2d(3, 64, 11, stride=4), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        nn.Flatten(), nn.Linear(256 * side * side, fc), nn.ReLU(), nn.Linear(fc, fc), nn.ReLU(),
        nn.Linear(fc, classes))


def main():
    args = peer_common.parse_args(__doc__)
    batch, image, fc, classes = (1, 100, 64, 10) if args.smoke else (16, 224, 4096, 1000)

    def make_step():
        model = alexnet(image, fc, classes)
        batches = [(torch.rand(batch, 3, image, image), torch.randint(0, classes, (batch,)))
                   for _ in range(2)]
        return peer_common.sgd_step(model, torch.optim.SGD(model.parameters(), lr=0.01),
                                    nn.functional.cross_entropy, batches)

    peer_common.run("alexnet", "images", batch, make_step, args, conv=True)


if __name__ == "__main__":
    main()
