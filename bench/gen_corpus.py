"""The corpus generator of include/shardtopk/generator.hpp, ported to int64 array arithmetic
with wrap-around, so the same code runs on numpy arrays (tested here against the C++ host
generator, bench/test_generator.py) and on torch tensors on the GPU (torch has no full uint64
arithmetic). Unsigned operations are emulated bit for bit: + and * wrap modulo 2**64 in two's
complement exactly as uint64 does, ^ and & are bitwise, and the logical right shift is an
arithmetic shift masked to the low 64 - s bits.

value(seed, row, col) = (sum of the four 16-bit fields of h - 131070) * 2**-15, with
h = splitmix64(splitmix64(seed ^ (row * 0xD1B54A32D192ED03)) + col).
Queries of the benchmarks are rows 0.. of seed + 1.
"""


def _s64(c):
    """uint64 constant as the int64 with the same bits."""
    c &= (1 << 64) - 1
    return c - (1 << 64) if c >= (1 << 63) else c


GOLDEN = _s64(0x9E3779B97F4A7C15)
MIX1 = _s64(0xBF58476D1CE4E5B9)
MIX2 = _s64(0x94D049BB133111EB)
ROWMUL = _s64(0xD1B54A32D192ED03)


def _srl(x, s):
    return (x >> s) & ((1 << (64 - s)) - 1)


def splitmix64(x):
    x = x + GOLDEN
    x = (x ^ _srl(x, 30)) * MIX1
    x = (x ^ _srl(x, 27)) * MIX2
    return x ^ _srl(x, 31)


def field_sum(row, col, seed):
    """int64 arrays row [R, 1] and col [1, D] -> the centred sum s [R, D] (int64, |s| <= 131070)."""
    h = splitmix64(splitmix64((row * ROWMUL) ^ _s64(seed)) + col)
    return (h & 0xFFFF) + (_srl(h, 16) & 0xFFFF) + (_srl(h, 32) & 0xFFFF) + _srl(h, 48) - 131070


def numpy_rows(seed, first_row, rows, dim):
    """float32 [rows, dim], equal bit for bit to shardtopk::generate_rows."""
    import numpy as np
    with np.errstate(over="ignore"):
        r = (np.arange(rows, dtype=np.int64) + np.int64(first_row))[:, None]
        c = np.arange(dim, dtype=np.int64)[None, :]
        s = field_sum(r, c, seed)
    return s.astype(np.float32) * np.float32(1.0 / 32768.0)


def torch_rows(seed, first_row, rows, dim, device, out_dtype=None, chunk_rows=1 << 17, normalize=False):
    """torch [rows, dim] on `device`, generated in row chunks (bounded int64 temporaries), float32
    values (exact) rounded to out_dtype at the end of each chunk; with normalize=True each row is
    L2-normalised in float32 first (cosine), as the engines store it."""
    import torch
    out_dtype = out_dtype or torch.float32
    out = torch.empty((rows, dim), dtype=out_dtype, device=device)
    c = torch.arange(dim, dtype=torch.int64, device=device)[None, :]
    for r0 in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - r0)
        r = (torch.arange(n, dtype=torch.int64, device=device) + (first_row + r0))[:, None]
        v = field_sum(r, c, seed).to(torch.float32) * (1.0 / 32768.0)
        if normalize:
            v = torch.nn.functional.normalize(v, dim=1)
        out[r0:r0 + n] = v.to(out_dtype)
        del v
    return out
