#!/usr/bin/python3
"""PyTorch peer for bench/lstm_bench.cc: an LSTM language model, vocabulary 10,000,
embedding and hidden 512, one layer unrolled 20 steps (torch.nn.LSTM, time-major), batch
32, plain SGD (lr 0.1); the embedding's gradient is sparse (sparse=True), as troupe's
update of it is. Two output layers, as troupe's benchmark:

  full      Linear 512 -> 10,000 and cross-entropy over the whole vocabulary;
  sampled   tf.nn.sampled_softmax_loss as troupe's nn::sampled_softmax_loss computes it:
            512 distinct classes drawn in every step from the log-uniform sampler (by
            rejection, expected counts -expm1(tries * log1p(-p))), logits of the true
            class and the samples (rows of a [10,000, 512] weight gathered with sparse
            gradients) minus log(expected count), accidental hits removed, true class at 0.

Reports words/s (batch x unroll per step).

  LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4 /usr/bin/python3 bench/peers/lstm_peer.py --loss full

Prints JSON (see peer_common.py). Needs python3-torch; installed only by bench/run.sh.
"""
import math
import sys

import torch
from torch import nn
from torch.nn import functional as F

import peer_common


def log_uniform(n, vocab, generator):
    """Samples of TensorFlow's LogUniformCandidateSampler (with replacement)."""
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    k = torch.exp(u * math.log(vocab + 1.0)).long() - 1
    return k.clamp_(0, vocab - 1)


def unique_log_uniform(n, vocab, generator):
    """n distinct classes by rejection, and how many draws that took."""
    chosen, seen, tries = [], set(), 0
    while len(chosen) < n:
        for k in log_uniform(2 * n, vocab, generator).tolist():
            tries += 1
            if k not in seen:
                seen.add(k)
                chosen.append(k)
                if len(chosen) == n:
                    break
    return torch.tensor(chosen), tries


def log_expected_count(k, vocab, tries):
    """log of TensorFlow's expected count for a unique sampler: -expm1(tries * log1p(-p))."""
    p = torch.log((k.double() + 2.0) / (k.double() + 1.0)) / math.log(vocab + 1.0)
    return torch.log(-torch.expm1(tries * torch.log1p(-p))).float()


class LanguageModel(nn.Module):
    def __init__(self, vocab, hidden, sampled, samples=0):
        super().__init__()
        self.vocab, self.samples = vocab, samples
        self.generator = torch.Generator().manual_seed(7)
        self.embedding = nn.Embedding(vocab, hidden, sparse=True)
        self.lstm = nn.LSTM(hidden, hidden)
        self.sampled = sampled
        if sampled:
            self.weights = nn.Parameter(torch.empty(vocab, hidden).uniform_(-0.02, 0.02))
            self.biases = nn.Parameter(torch.zeros(vocab, 1))
        else:
            self.softmax = nn.Linear(hidden, vocab)

    def forward(self, ids, labels):
        unroll, batch = ids.shape
        h, _ = self.lstm(self.embedding(ids))
        h = h.reshape(unroll * batch, -1)
        if not self.sampled:
            return F.cross_entropy(self.softmax(h), labels)
        candidates, tries = unique_log_uniform(self.samples, self.vocab, self.generator)
        log_q_sampled = log_expected_count(candidates, self.vocab, tries)
        log_q_true = log_expected_count(labels, self.vocab, tries)
        true_w = F.embedding(labels, self.weights, sparse=True)
        true_b = F.embedding(labels, self.biases, sparse=True).squeeze(1)
        true_logits = (h * true_w).sum(1) + true_b - log_q_true
        sampled_w = F.embedding(candidates, self.weights, sparse=True)
        sampled_b = F.embedding(candidates, self.biases, sparse=True).squeeze(1)
        sampled_logits = h @ sampled_w.t() + sampled_b - log_q_sampled
        hits = labels.unsqueeze(1) == candidates.unsqueeze(0)
        sampled_logits = sampled_logits.masked_fill(hits, torch.finfo(sampled_logits.dtype).min)
        logits = torch.cat([true_logits.unsqueeze(1), sampled_logits], 1)
        return F.cross_entropy(logits, torch.zeros(unroll * batch, dtype=torch.long))


def main():
    sys.argv, loss = peer_common.pop_option(sys.argv, "--loss", "full")
    if loss not in ("full", "sampled"):
        raise SystemExit(f"lstm_peer.py: --loss must be full or sampled, not {loss!r}")
    args = peer_common.parse_args(__doc__)
    vocab, hidden, batch, unroll, samples = (50, 8, 2, 3, 8) if args.smoke else (10000, 512, 32, 20, 512)
    sampled = loss == "sampled"

    def make_step():
        model = LanguageModel(vocab, hidden, sampled, samples)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(42)
        batches = []
        for _ in range(4):
            ids = log_uniform(unroll * batch, vocab, gen).reshape(unroll, batch)
            labels = log_uniform(unroll * batch, vocab, gen)
            batches.append((ids, labels))
        state = {"next": 0}

        def step():
            inputs = batches[state["next"]]
            state["next"] = (state["next"] + 1) % len(batches)
            optimizer.zero_grad(set_to_none=True)
            model(*inputs).backward()
            optimizer.step()
        return step

    peer_common.run(f"lstm_{loss}", "words", batch * unroll, make_step, args,
                    extra={"loss": loss, "samples": samples if sampled else None}, sgd=False)


if __name__ == "__main__":
    main()
