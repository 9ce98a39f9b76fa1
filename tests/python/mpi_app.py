"""A program test_module.py runs under `mpiexec -n P`: rank 0 searches, the other ranks follow.

    mpiexec -n 2 python3 mpi_app.py --module-dir DIR --out PREFIX --scenario S [--config C.yaml]

Scenarios (the followers' side differs, rank 0 always searches and closes):
  follow     followers call index.follow()
  close      followers call index.close() (serves rank 0 until it closes)
  with       followers leave a `with` block at once (close() at its end)
  exit       followers do nothing: the index is closed at interpreter exit
  mismatch   rank 1 passes other arrays than rank 0: every rank must fail to build
  open       Index.open(--config) instead of from_arrays; followers follow()

Each rank writes PREFIX.rank<R>.json (what happened there); rank 0 also writes PREFIX.npz with
its answers (ids_a/scores_a: 3 queries, ids_b/scores_b: 20 queries searched 8 at a time, and,
for from_arrays, ids_f/scores_f: the 20 queries with FILTER over the `tenant` attribute), and
those of order_answers() (ranges, a second page, counts, rank_of).
"""

import argparse
import json
import sys

import numpy as np


def corpus():
    rng = np.random.default_rng(7)
    vectors = rng.integers(-3, 4, size=(1001, 19)).astype(np.float32)
    queries = rng.integers(-3, 4, size=(20, 19)).astype(np.float32)
    ids = np.arange(1001, dtype=np.int64)[::-1] * 3 + 5  # not row positions: ties break by these
    return vectors, ids, queries


def attributes():
    return {"tenant": np.arange(1001) // 100}


FILTER = {"any": [{"in": {"tenant": [2, 9]}}, {"ids_in": [5, 8, 11]}]}
MIN_SCORE = 3.0
RANK_ROWS = [0, 500, 1000, 3, 0]  # rows whose ids rank_of asks for (a repeat too)


def order_answers(index, queries, filtered):
    """Ranges, pages, counts and ranks (search's order arguments, rank_of): name -> array."""
    _, ids, _ = corpus()
    out = {}
    out["ids_r"], out["scores_r"], st = index.search(queries, 12, min_score=MIN_SCORE)
    out["total_r"], out["scanned_r"] = st["total"], st["rows_scanned"]
    _, _, first = index.search(queries, 7, stats=True)
    out["ids_p"], out["scores_p"], _ = index.search(queries, 7, search_after=first["next"])
    if filtered:
        _, _, c = index.search(queries, filter=FILTER, min_score=MIN_SCORE, count_only=True)
        out["total_f"], out["passing_f"] = c["total"], c["rows_passing"]
    out["ranks_o"], out["rscores_o"] = index.rank_of(queries[0], ids[RANK_ROWS])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--module-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--scenario", required=True)
    ap.add_argument("--config")
    a = ap.parse_args()
    sys.path.insert(0, a.module_dir)
    import shardtopk

    vectors, ids, queries = corpus()
    status = {"ok": True}
    rank = -1
    try:
        if a.scenario == "open":
            index = shardtopk.Index.open(a.config, engine__backend="cpu", engine__threads=1, search__batch_max=8)
        else:
            import os
            if a.scenario == "mismatch" and os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK")) == "1":
                vectors = vectors[:-1]
                ids = ids[:-1]
            index = shardtopk.Index.from_arrays(vectors, ids=ids, backend="cpu", batch_max=8, engine__threads=1,
                                                attributes=attributes())
        rank = index.rank
        status["info"] = index.info()
        if rank == 0:
            ids_a, scores_a = index.search(queries[:3], 10)
            try:
                bad = queries[:2].copy()
                bad[1, 4] = np.inf
                index.search(bad, 10)
                status["bad_query"] = "no error"
            except ValueError as e:
                status["bad_query"] = str(e)
            ids_b, scores_b = index.search(queries, 10)  # 20 queries: 8 at a time
            out = dict(ids_a=ids_a, scores_a=scores_a, ids_b=ids_b, scores_b=scores_b)
            if a.scenario != "open":
                out["ids_f"], out["scores_f"] = index.search(queries, 10, filter=FILTER)
            out.update(order_answers(index, queries, a.scenario != "open"))
            np.savez(a.out + ".npz", **out)
            index.close()
        elif a.scenario in ("follow", "open"):
            index.follow()
        elif a.scenario == "close":
            index.close()
        elif a.scenario == "with":
            with index:
                pass
        elif a.scenario == "exit":
            pass
        status["closed"] = index.closed
    except Exception as e:  # recorded for the test, which judges it
        status = {"ok": False, "type": type(e).__name__, "message": str(e)}
    if rank < 0:
        import os
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    with open(f"{a.out}.rank{rank}.json", "w") as f:
        json.dump(status, f)


if __name__ == "__main__":
    main()
