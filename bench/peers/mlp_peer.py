#!/usr/bin/python3
"""PyTorch peer for bench/mlp_bench.cc: MLP 784-512-512-10 (ReLU), batch 64, softmax
cross-entropy, plain SGD (lr 0.01); one training step per iteration, batches made once.

  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/bin/python3 bench/peers/mlp_peer.py

Prints JSON (see peer_common.py). Needs python3-torch; installed only by bench/run.sh.
"""
import torch
from torch import nn

import peer_common


def main():
    args = peer_common.parse_args(__doc__)
    batch, hidden = (4, 16) if args.smoke else (64, 512)

    def make_step():
        model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                              nn.Linear(hidden, 10))
        batches = [(torch.rand(batch, 784), torch.randint(0, 10, (batch,))) for _ in range(4)]
        return peer_common.sgd_step(model, torch.optim.SGD(model.parameters(), lr=0.01),
                                    nn.functional.cross_entropy, batches)

    peer_common.run("mlp", "examples", batch, make_step, args)


if __name__ == "__main__":
    main()
