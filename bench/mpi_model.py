#!/usr/bin/env python3
"""The communication cost of data-parallel `relattn train` on P processes,
from a model rather than a cluster (this machine has 2 cores).

Each step sums the flat gradient (the parameters in float32, plus the loss)
with one MPI_Allreduce. For a ring allreduce of S bytes over P processes the
time is about

    2 (P - 1) / P * S / bandwidth  +  2 (P - 1) * latency

(each process sends and receives 2 (P - 1) / P of the buffer, in 2 (P - 1)
messages). The compute of a step is the global batch's images over the
processes, at the rate one process reaches (measured: relattn train on
this machine). With no overlap of the sum and the backward, the efficiency
is compute / (compute + communication).

    python3 bench/mpi_model.py --params 533430 --rate 1580 [--batch 128]

prints a Markdown table for 8, 16, 32 and 64 processes over two networks,
for the global batch fixed (strong scaling) and for the batch per process
fixed (weak scaling).
"""
import argparse

NETWORKS = [  # name, bandwidth (bytes/s), latency (s) per message: assumptions
    ("10 Gb/s Ethernet (1.1 GB/s, 25 us)", 1.1e9, 25e-6),
    ("100 Gb/s InfiniBand (11 GB/s, 2 us)", 11e9, 2e-6),
]


def allreduce_seconds(nbytes, procs, bandwidth, latency):
    if procs < 2:
        return 0.0
    return 2 * (procs - 1) / procs * nbytes / bandwidth + 2 * (procs - 1) * latency


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=int, required=True, help="parameters of the model")
    ap.add_argument("--rate", type=float, required=True,
                    help="images/s one process trains (measured)")
    ap.add_argument("--batch", type=int, default=128, help="global batch (strong scaling) "
                    "and batch per process (weak scaling)")
    ap.add_argument("--procs", default="8,16,32,64")
    a = ap.parse_args()
    nbytes = 4 * (a.params + 1)
    print(f"gradient sum of {nbytes / 1e6:.2f} MB per step; one process trains "
          f"{a.rate:.0f} images/s\n")
    print("| processes | network | allreduce ms | strong: compute ms | strong: efficiency "
          "| weak: compute ms | weak: efficiency |")
    print("|---|---|---|---|---|---|---|")
    for p in (int(x) for x in a.procs.split(",")):
        for name, bw, lat in NETWORKS:
            comm = allreduce_seconds(nbytes, p, bw, lat)
            strong = a.batch / p / a.rate     # the global batch shared by p
            weak = a.batch / a.rate           # a full batch on each
            print(f"| {p} | {name} | {comm * 1e3:.2f} | {strong * 1e3:.2f} | "
                  f"{strong / (strong + comm):.0%} | {weak * 1e3:.1f} | "
                  f"{weak / (weak + comm):.0%} |")


if __name__ == "__main__":
    main()
