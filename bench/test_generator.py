#!/usr/bin/env python3
"""Bit-equality of the Python generator ports (bench/gen_corpus.py) with the C++ host generator
(shardtopk::generate_rows, through bench_gen_dump). numpy always; torch too when installed
(CPU here, and on the GPU when one is visible). Exit 0 when every case is bit-identical."""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_corpus  # noqa: E402

CASES = [  # seed, first_row, rows, dim: small/huge seeds (>= 2**63), huge rows, odd dims
    (1, 0, 257, 33),
    (2, 0, 64, 768),
    (0, 5, 100, 7),
    (0xFFFFFFFFFFFFFFFF, 123456789, 50, 19),
    (0x8000000000000001, 10**12, 40, 65),
    (12345, 2**40 + 3, 31, 1024),
]


def cpp_rows(binary, seed, first, rows, dim):
    raw = subprocess.run([binary, str(seed), str(first), str(rows), str(dim)], check=True, capture_output=True).stdout
    return np.frombuffer(raw, dtype=np.float32).reshape(rows, dim)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin", required=True, help="bench_gen_dump")
    a = ap.parse_args()
    bad = 0
    try:
        import torch
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    except ImportError:
        torch, devices = None, []
        print("torch not installed: numpy port only")
    for seed, first, rows, dim in CASES:
        ref = cpp_rows(a.bin, seed, first, rows, dim)
        got = gen_corpus.numpy_rows(seed, first, rows, dim)
        same = np.array_equal(ref.view(np.uint32), got.view(np.uint32))
        print(f"numpy seed={seed} first={first} [{rows} x {dim}]: {'bit-identical' if same else 'DIFFERENT'}")
        bad += not same
        for dev in devices:
            t = gen_corpus.torch_rows(seed, first, rows, dim, dev, chunk_rows=37).cpu().numpy()
            same = np.array_equal(ref.view(np.uint32), t.view(np.uint32))
            print(f"torch/{dev} seed={seed} first={first} [{rows} x {dim}]: {'bit-identical' if same else 'DIFFERENT'}")
            bad += not same
    print("OK" if bad == 0 else f"FAILED: {bad} case(s) differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
