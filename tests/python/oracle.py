"""The float64 oracle of the Python tests (DESIGN.md "Correctness terms").

A plain numpy computation that shares no code with the engines: every (query, row) score in
float64 from the stored row values, the one ordering rule (higher score first, l2: smaller
squared distance first; equal scores: smaller global id first), and the checks of an answer:
exact ids and scores where the arithmetic is exact, hits and scores within
eps = 1e-5 * (max(|best|, |k-th best|) + 1) elsewhere.
"""

import numpy as np


def round_to_storage(rows, dtype):
    """Row values as the engine stores them (float32 input rounded to float16 or bfloat16, nearest even)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    if dtype == "float32":
        return rows.astype(np.float64)
    if dtype == "float16":
        return rows.astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        bits = rows.view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    raise ValueError(dtype)


def normalize64(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def scores64(C, Q, metric):
    """[B, N] float64 scores in the metric's units (l2: squared distance)."""
    C = np.asarray(C, dtype=np.float64)
    Q = np.asarray(Q, dtype=np.float64)
    if metric == "inner_product":
        return Q @ C.T
    if metric == "cosine":
        return normalize64(Q) @ normalize64(C).T
    if metric == "l2":
        out = np.empty((Q.shape[0], C.shape[0]))
        for b in range(Q.shape[0]):
            d = C - Q[b]
            out[b] = np.einsum("nd,nd->n", d, d)
        return out
    raise ValueError(metric)


def order(scores, ids, metric):
    """Row positions of one query's candidates, best first by the ordering rule."""
    key = scores if metric == "l2" else -scores
    return np.lexsort((ids, key))


def topk(C, ids, Q, k, metric):
    """(ids [B, k] int64, scores [B, k] float64): the true top-k under the ordering rule."""
    S = scores64(C, Q, metric)
    out_ids = np.empty((Q.shape[0], k), dtype=np.int64)
    out_s = np.empty((Q.shape[0], k))
    for b in range(Q.shape[0]):
        o = order(S[b], ids, metric)[:k]
        out_ids[b] = ids[o]
        out_s[b] = S[b][o]
    return out_ids, out_s


def problems(ret_ids, ret_scores, C, ids, Q, k, metric, exact=False):
    """What is wrong with an answer, as a list of messages (empty: correct).

    exact: ids must equal the oracle's and scores its values (inputs whose scores are exact in
    float32). Otherwise each returned id must be a hit within eps, its score within eps of its
    float64 score, the list in order within eps, and no id twice.
    """
    ret_ids = np.asarray(ret_ids)
    ret_scores = np.asarray(ret_scores, dtype=np.float64)
    want_ids, want_s = topk(C, ids, Q, k, metric)
    if exact:
        out = []
        for b in range(Q.shape[0]):
            if not np.array_equal(ret_ids[b], want_ids[b]):
                out.append(f"query {b}: ids {ret_ids[b].tolist()} != oracle {want_ids[b].tolist()}")
            elif not np.array_equal(ret_scores[b], want_s[b]):
                out.append(f"query {b}: scores {ret_scores[b].tolist()} != oracle {want_s[b].tolist()}")
        return out
    S = scores64(C, Q, metric)
    row_of = {int(g): i for i, g in enumerate(ids)}
    l2 = metric == "l2"
    out = []
    for b in range(Q.shape[0]):
        best, kth = want_s[b][0], want_s[b][k - 1]
        eps = 1e-5 * (max(abs(best), abs(kth)) + 1)
        if len(set(ret_ids[b].tolist())) != k:
            out.append(f"query {b}: an id appears twice: {ret_ids[b].tolist()}")
            continue
        for r in range(k):
            g = int(ret_ids[b][r])
            if g not in row_of:
                out.append(f"query {b} rank {r}: id {g} is not a corpus id")
                continue
            s = S[b][row_of[g]]
            if (s > kth + eps) if l2 else (s < kth - eps):
                out.append(f"query {b} rank {r}: id {g} score {s} misses the k-th {kth} by more than eps {eps}")
            if abs(ret_scores[b][r] - s) > eps:
                out.append(f"query {b} rank {r}: returned score {ret_scores[b][r]} vs float64 {s} (eps {eps})")
            if r > 0:
                prev = ret_scores[b][r - 1]
                if (ret_scores[b][r] < prev - eps) if l2 else (ret_scores[b][r] > prev + eps):
                    out.append(f"query {b} rank {r}: out of order ({prev} then {ret_scores[b][r]})")
    return out
