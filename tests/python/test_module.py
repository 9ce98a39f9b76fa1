"""The Python module on the CPU engine (no GPU needed), against the float64 oracle (oracle.py).

    python3 tests/python/test_module.py --module-dir build/python [--cli build/shardtopk]
        [--mpiexec mpiexec --mpiexec-flags "--allow-run-as-root --oversubscribe"] [unittest args]

CTest runs it (test_python_module). Without --cli the comparison with the command line is
skipped, without --mpiexec the 2-rank runs are; each says so.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import unittest
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

ARGS = None
shardtopk = None


def small_int_corpus(n=2003, d=37, seed=1):
    """Small integers: every score is exact in float32, and many are equal (ties on purpose)."""
    rng = np.random.default_rng(seed)
    return rng.integers(-3, 4, size=(n, d)).astype(np.float32)


def cpu_index(vectors, **kw):
    kw.setdefault("backend", "cpu")
    kw.setdefault("engine__threads", 2)
    return shardtopk.Index.from_arrays(vectors, **kw)


class OracleTests(unittest.TestCase):
    """Answers against the float64 oracle: exact on small integers, within eps elsewhere."""

    def test_exact_ids_with_ties(self):
        C = small_int_corpus()
        rng = np.random.default_rng(2)
        Q = rng.integers(-3, 4, size=(9, C.shape[1])).astype(np.float32)
        ids = rng.permutation(C.shape[0]).astype(np.int64) * 7 - 5000  # ties break by these, not positions
        for metric in ("inner_product", "l2"):
            for dtype in ("float32", "float16", "bfloat16"):
                with cpu_index(C, ids=ids, metric=metric, dtype=dtype, k_max=C.shape[0]) as index:
                    for k in (1, 10, 100, C.shape[0]):
                        got_ids, got_s = index.search(Q, k)
                        self.assertEqual(got_ids.dtype, np.int64)
                        self.assertEqual(got_s.dtype, np.float32)
                        self.assertEqual(got_ids.shape, (Q.shape[0], k))
                        p = oracle.problems(got_ids, got_s, C, ids, Q, k, metric, exact=True)
                        self.assertEqual(p, [], f"{metric} {dtype} k={k}")

    def test_within_eps_float_data(self):
        rng = np.random.default_rng(3)
        C = rng.standard_normal((3001, 48)).astype(np.float32)
        Q = rng.standard_normal((6, 48)).astype(np.float32)
        ids = np.arange(C.shape[0], dtype=np.int64)
        for metric in ("inner_product", "cosine", "l2"):
            for dtype in ("float32", "float16", "bfloat16"):
                with cpu_index(C, metric=metric, dtype=dtype) as index:
                    got_ids, got_s = index.search(Q, 25)
                if metric == "cosine":  # rows stored normalised, then rounded: scored as they are
                    stored = oracle.round_to_storage(oracle.normalize64(C).astype(np.float32), dtype)
                    p = oracle.problems(got_ids, got_s, stored, ids, oracle.normalize64(Q), 25, "inner_product")
                else:
                    p = oracle.problems(got_ids, got_s, oracle.round_to_storage(C, dtype), ids, Q, 25, metric)
                self.assertEqual(p, [], f"{metric} {dtype}")

    def test_batch_and_split_independence(self):
        """A query's answer is bit-identical alone, in a batch, and in a batch split by batch_max."""
        C = small_int_corpus(n=500, d=16, seed=4)
        rng = np.random.default_rng(5)
        Q = rng.standard_normal((21, 16)).astype(np.float32)
        with cpu_index(C, batch_max=8) as index:
            all_ids, all_s = index.search(Q, 12)  # 8 + 8 + 5
            for b in range(Q.shape[0]):
                ids1, s1 = index.search(Q[b], 12)  # 1-D: a batch of one
                self.assertEqual(ids1.shape, (1, 12))
                np.testing.assert_array_equal(ids1[0], all_ids[b])
                np.testing.assert_array_equal(s1[0].view(np.uint32), all_s[b].view(np.uint32))

    def test_lists_and_host_dlpack_objects(self):
        C = small_int_corpus(n=300, d=8, seed=6)
        Q = C[:4].copy()

        class HostTensor:  # any producer of host memory through DLPack
            def __init__(self, a):
                self.a = a

            def __dlpack__(self, stream=None):
                assert stream is None
                return self.a.__dlpack__()

            def __dlpack_device__(self):
                return self.a.__dlpack_device__()

        with cpu_index(C) as index:
            want = index.search(Q, 5)
            for q in (Q.tolist(), HostTensor(Q)):
                got = index.search(q, 5)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
            with self.assertRaisesRegex(ValueError, "queries must be float32, got float64"):
                index.search(HostTensor(Q.astype(np.float64)), 5)
            with self.assertRaisesRegex(ValueError, r"C-contiguous .*strides \(1, 4\) elements for shape \[4, 8\]"):
                index.search(HostTensor(np.asfortranarray(Q)), 5)

    def test_torch_host_tensors(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch is not installed")
        C = small_int_corpus(n=300, d=8, seed=16)
        with cpu_index(C) as index:
            want = index.search(C[:4], 5)
            for q in (torch.from_numpy(C[:4]), torch.from_numpy(C[:4]).requires_grad_()):
                got = index.search(q, 5)  # host tensors: the host path, numpy answers
                self.assertIsInstance(got[0], np.ndarray)
                np.testing.assert_array_equal(got[0], want[0])
                np.testing.assert_array_equal(got[1], want[1])
            with self.assertRaisesRegex(ValueError, "queries must be float32, got float64"):
                index.search(torch.from_numpy(C[:4]).double(), 5)
            with self.assertRaisesRegex(ValueError, r"C-contiguous .*strides \(1, 8\) elements for shape \[8, 4\]"):
                index.search(torch.from_numpy(C[:4]).t(), 5)

    def test_out_arrays(self):
        C = small_int_corpus(n=300, d=8, seed=8)
        Q = C[:3].copy()
        with cpu_index(C) as index:
            want_ids, want_s = index.search(Q, 4)
            ids = np.zeros((3, 4), np.int64)
            scores = np.zeros((3, 4), np.float32)
            got = index.search(Q, 4, out=(ids, scores))
            self.assertIs(got[0], ids)
            self.assertIs(got[1], scores)
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_array_equal(scores, want_s)
            for bad, msg in (((np.zeros((3, 5), np.int64), scores), r"out\[0\] \(ids\) must have shape \[3, 4\]"),
                             ((ids, np.zeros((3, 4), np.float64)), r"out\[1\] \(scores\) must be float32"),
                             ((ids,), "out= must be a pair")):
                with self.assertRaisesRegex(ValueError, msg):
                    index.search(Q, 4, out=bad)

    def test_threads_share_an_index(self):
        C = small_int_corpus(n=2000, d=32, seed=9)
        Q = np.random.default_rng(10).standard_normal((40, 32)).astype(np.float32)
        with cpu_index(C) as index:
            want = [index.search(Q[i], 7) for i in range(40)]
            got = [None] * 40

            def worker(t):
                for i in range(t, 40, 4):
                    got[i] = index.search(Q[i], 7)

            threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for w, g in zip(want, got):
                np.testing.assert_array_equal(w[0], g[0])
                np.testing.assert_array_equal(w[1], g[1])


class BadInputTests(unittest.TestCase):
    """Bad input: ValueError with the command line's message, and nothing changes."""

    @classmethod
    def setUpClass(cls):
        cls.C = small_int_corpus(n=400, d=12, seed=11)
        cls.index = cpu_index(cls.C, k_max=50, batch_max=16)
        cls.Q = cls.C[:3].copy()
        cls.want = cls.index.search(cls.Q, 5)

    @classmethod
    def tearDownClass(cls):
        cls.index.close()

    def tearDown(self):  # every bad call leaves the index answering as before
        got = self.index.search(self.Q, 5)
        np.testing.assert_array_equal(got[0], self.want[0])
        np.testing.assert_array_equal(got[1], self.want[1])

    def check(self, pattern, *args, **kw):
        with self.assertRaisesRegex(ValueError, pattern):
            self.index.search(*args, **kw)

    def test_wrong_dimension(self):
        self.check("queries have dimension 11 but the index has dimension 12", np.ones((2, 11), np.float32), 5)
        self.check("queries have dimension 13 but the index has dimension 12", np.ones(13, np.float32), 5)
        self.check("queries must be 1-D .dim. or 2-D .batch, dim., got 3-D", np.ones((1, 2, 12), np.float32), 5)
        # a slice of the wrong width is named by its dimension first, not by its layout
        self.check("queries have dimension 3 but the index has dimension 12", np.ones((2, 12), np.float32)[:, :3], 5)

    def test_non_finite(self):
        for v, text in ((np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")):
            q = self.Q.copy()
            q[2, 7] = v
            self.check(f"query 2 of the batch has a non-finite value \\({text}\\) at column 7", q, 5)

    def test_non_finite_in_a_split_batch_names_the_call_queries(self):
        q = np.ones((40, 12), np.float32)
        q[37, 1] = np.nan
        self.check(r"queries 32 \.\. 39 of this call .*: query 5 of the batch has a non-finite value", q, 5)

    def test_k_out_of_range(self):
        self.check(r"k=0 out of range: allowed 1 \.\. 50", self.Q, 0)
        self.check(r"k=51 out of range: allowed 1 \.\. 50 \(search.k_max\)", self.Q, 51)
        self.check(r"k=-3 out of range", self.Q, -3)
        self.check("k must be an integer, got float", self.Q, 2.0)
        self.check("k must be an integer, got bool", self.Q, True)
        self.index.search(self.Q, np.int64(5))  # numpy integers are integers

    def test_wrong_dtype_and_layout(self):
        self.check("queries must be float32, got float64", self.Q.astype(np.float64), 5)
        self.check("queries must be float32, got float16", self.Q.astype(np.float16), 5)
        self.check("queries must be float32, got int32", self.Q.astype(np.int32), 5)
        self.check("C-contiguous", np.asfortranarray(np.ones((3, 12), np.float32)), 5)
        self.check("C-contiguous", np.ones((3, 24), np.float32)[:, ::2], 5)

    def test_empty_batch(self):
        ids, scores = self.index.search(np.zeros((0, 12), np.float32), 5)
        self.assertEqual(ids.shape, (0, 5))
        self.assertEqual(scores.shape, (0, 5))
        self.check(r"k=0 out of range", np.zeros((0, 12), np.float32), 0)

    def test_bad_filters(self):
        self.check(r"filter: unknown attribute 'tenant' \(known: none", self.Q, 5, filter={"eq": {"tenant": 1}})
        self.check("filter: unknown operator 'eqq'", self.Q, 5, filter={"eqq": {"a": 1}})
        self.check("filter: invalid JSON", self.Q, 5, filter='{"ids_in": [1, 2]')
        self.check(r"filter: not a JSON value \(ValueError: Out of range float", self.Q, 5,
                   filter={"ids_in": [float("nan")]})
        self.check(r"filter: not a JSON value \(TypeError", self.Q, 5, filter={"ids_in": [object()]})
        deep = {}
        node = deep
        for _ in range(100000):  # far past the interpreter's recursion limit
            node["not"] = {}
            node = node["not"]
        self.check(r"filter: not a JSON value \(RecursionError", self.Q, 5, filter=deep)
        self.check("filter: nested deeper than 32 levels", self.Q, 5, filter='{"not": ' * 100)

    def test_device_queries_on_the_cpu_engine(self):
        class OnGpu:
            def __dlpack_device__(self):
                return (2, 0)

            def __dlpack__(self, stream=None):
                raise AssertionError("must be refused before the exchange")

        self.check("queries are on cuda:0 but the index runs on the cpu engine", OnGpu(), 5)

    def test_search_on_a_closed_index(self):
        other = cpu_index(self.C)
        other.close()
        other.close()  # idempotent
        self.assertTrue(other.closed)
        with self.assertRaisesRegex(ValueError, "the index is closed"):
            other.search(self.Q, 5)
        self.assertEqual(other.info()["rows"], 400)


class OrderQueryTests(unittest.TestCase):
    """Ranges, pages, counts and ranks (search's order arguments, rank_of) against the float64
    oracle: small-integer rows (exact scores, many ties, ids that are not row positions)."""

    @classmethod
    def setUpClass(cls):
        cls.C = small_int_corpus(n=701, d=9, seed=21)
        rng = np.random.default_rng(22)
        cls.ids = rng.permutation(cls.C.shape[0]).astype(np.int64) * 5 - 1000  # ties break by these
        cls.tenant = np.arange(cls.C.shape[0]) % 3
        cls.Q = rng.integers(-3, 4, size=(5, cls.C.shape[1])).astype(np.float32)
        cls.index = {m: cpu_index(cls.C, ids=cls.ids, metric=m, k_max=cls.C.shape[0], batch_max=4,
                                  attributes={"tenant": cls.tenant}) for m in ("inner_product", "l2")}

    @classmethod
    def tearDownClass(cls):
        for index in cls.index.values():
            index.close()

    def ordered(self, metric, q, mask=None):
        """The oracle's (ids, float64 scores) of query q over the rows passing mask, best first."""
        keep = np.ones(len(self.ids), bool) if mask is None else mask
        S = oracle.scores64(self.C[keep], self.Q[q:q + 1], metric)[0]
        o = oracle.order(S, self.ids[keep], metric)
        return self.ids[keep][o], S[o]

    def test_ranges_against_the_oracle(self):
        for metric, bound_arg in (("inner_product", "min_score"), ("l2", "max_distance")):
            index = self.index[metric]
            for use_filter in (False, True):
                mask = self.tenant != 1 if use_filter else None
                filt = {"in": {"tenant": [0, 2]}} if use_filter else None
                # each query's bound is a score some rows have (ties at the bound are inside)
                bounds = [float(self.ordered(metric, q, mask)[1][40 + 9 * q]) for q in range(len(self.Q))]
                for k in (1, 30, 200):
                    with self.subTest(metric=metric, filter=use_filter, k=k):
                        ids, scores, st = index.search(self.Q, limit=k, filter=filt, **{bound_arg: bounds})
                        self.assertEqual(ids.shape, (len(self.Q), k))
                        for q in range(len(self.Q)):
                            want_ids, want_s = self.ordered(metric, q, mask)
                            inside = want_s <= bounds[q] if metric == "l2" else want_s >= bounds[q]
                            self.assertGreater(inside.sum(), 40)  # the bound's ties reach past row 40
                            n = min(k, int(inside.sum()))
                            self.assertEqual(st["total"][q], inside.sum())
                            self.assertEqual(st["count"][q], n)
                            np.testing.assert_array_equal(ids[q, :n], want_ids[inside][:n])
                            np.testing.assert_array_equal(scores[q, :n], want_s[inside][:n].astype(np.float32))
                            self.assertTrue((ids[q, n:] == shardtopk.PAD_ID).all())
                            self.assertEqual(st["rows_scanned"][q], len(self.ids))
                            self.assertEqual(st["rows_passing"][q], len(want_ids))
                            if n == k:
                                self.assertEqual(st["next"][q], (float(scores[q, k - 1]), int(ids[q, k - 1])))
                            else:
                                self.assertIsNone(st["next"][q])
                        # the same bound for every query (a scalar); the counts alone
                        _, _, one = index.search(self.Q, k, filter=filt, **{bound_arg: bounds[0]})
                        c_ids, c_scores, c = index.search(self.Q, filter=filt, count_only=True, **{bound_arg: bounds})
                        self.assertEqual((c_ids.shape, c_scores.shape), ((len(self.Q), 0), (len(self.Q), 0)))
                        np.testing.assert_array_equal(c["total"], st["total"])
                        self.assertNotIn("next", c)
                        for q in range(len(self.Q)):
                            want_s = self.ordered(metric, q, mask)[1]
                            inside = want_s <= bounds[0] if metric == "l2" else want_s >= bounds[0]
                            self.assertEqual(one["total"][q], inside.sum())

    def test_pages_walked_to_the_end_equal_one_top_k(self):
        for metric in ("inner_product", "l2"):
            index = self.index[metric]
            for filt, mask in ((None, None), ({"eq": {"tenant": 2}}, self.tenant == 2)):
                with self.subTest(metric=metric, filter=filt):
                    rows = len(self.ids) if mask is None else int(mask.sum())
                    whole_ids, whole_s = index.search(self.Q, rows, filter=filt)
                    # batch 5 over batch_max 4: a split call, each query its own cursor
                    pages_i, pages_s = [[] for _ in self.Q], [[] for _ in self.Q]
                    after = None
                    todo = list(range(len(self.Q)))
                    steps = 0
                    while todo:
                        ids, scores, st = index.search(self.Q[todo], 37, filter=filt, search_after=after, stats=True)
                        self.assertTrue((st["total"] == -1).all())  # no bound: no total
                        for j, q in enumerate(todo):
                            n = st["count"][j]
                            pages_i[q].append(ids[j, :n])
                            pages_s[q].append(scores[j, :n])
                        keep = [j for j in range(len(todo)) if st["next"][j] is not None]
                        after = [st["next"][j] for j in keep]
                        todo = [todo[j] for j in keep]
                        steps += 1
                        self.assertLess(steps, rows // 37 + 3)
                    for q in range(len(self.Q)):
                        got_i, got_s = np.concatenate(pages_i[q]), np.concatenate(pages_s[q])
                        np.testing.assert_array_equal(got_i, whole_ids[q])
                        np.testing.assert_array_equal(got_s.view(np.uint32), whole_s[q].view(np.uint32))
                        want_ids, want_s = self.ordered(metric, q, mask)
                        np.testing.assert_array_equal(got_i, want_ids)
                        np.testing.assert_array_equal(got_s, want_s.astype(np.float32))

    def test_pages_of_a_range(self):
        index = self.index["inner_product"]
        want_ids, want_s = self.ordered("inner_product", 3)
        bound = float(want_s[100])
        got, after, total = [], None, None
        while True:
            ids, _, st = index.search(self.Q[3], 16, min_score=bound, search_after=after)
            total = st["total"][0]
            got.extend(ids[0, :st["count"][0]].tolist())
            after = st["next"][0]
            if after is None:
                break
        self.assertEqual(total, (want_s >= bound).sum())
        self.assertEqual(got, want_ids[want_s >= bound].tolist())
        # a cursor taken from the middle of a tie: the rest of the tie, then the rows below
        tie = np.flatnonzero(want_s == want_s[50])
        self.assertGreater(len(tie), 2)
        mid = tie[1]
        ids, _, _ = index.search(self.Q[3], 5, search_after=(float(want_s[mid]), int(want_ids[mid])))
        np.testing.assert_array_equal(ids[0], want_ids[mid + 1:mid + 6])

    def test_stats_of_a_plain_search(self):
        index = self.index["l2"]
        ids, scores = index.search(self.Q, 8)
        ids2, scores2, st = index.search(self.Q, 8, filter={"eq": {"tenant": 0}}, stats=True)
        self.assertTrue((st["total"] == -1).all())
        self.assertTrue((st["rows_scanned"] == len(self.ids)).all())
        self.assertTrue((st["rows_passing"] == (self.tenant == 0).sum()).all())
        self.assertEqual(st["total"].dtype, np.int64)
        self.assertEqual(st["count"].dtype, np.int32)
        self.assertEqual(len(st["next"]), len(self.Q))
        ids3, scores3, st3 = index.search(self.Q, 8, stats=True)
        np.testing.assert_array_equal(ids3, ids)  # the same answer, with stats or without
        np.testing.assert_array_equal(scores3.view(np.uint32), scores.view(np.uint32))
        self.assertTrue((st3["rows_passing"] == len(self.ids)).all())

    def test_rank_of_best_worst_and_tied_ids(self):
        for metric in ("inner_product", "l2"):
            index = self.index[metric]
            for filt, mask in ((None, None), ({"in": {"tenant": [0, 1]}}, self.tenant != 2)):
                for q in (0, 4):
                    with self.subTest(metric=metric, filter=filt, query=q):
                        want_ids, want_s = self.ordered(metric, q, mask)
                        tie = np.flatnonzero(want_s == want_s[len(want_s) // 2])
                        self.assertGreater(len(tie), 2)
                        pick = [0, len(want_ids) - 1] + tie.tolist()[::-1] + [0]  # best, worst, a tie, a repeat
                        # at most min(batch_max, k_max) = 4 ids a call
                        parts = [index.rank_of(self.Q[q], want_ids[pick[i:i + 4]], filter=filt)
                                 for i in range(0, len(pick), 4)]
                        ranks = np.concatenate([p[0] for p in parts])
                        scores = np.concatenate([p[1] for p in parts])
                        self.assertEqual((ranks.dtype, scores.dtype), (np.int64, np.float32))
                        np.testing.assert_array_equal(ranks, np.array(pick) + 1)
                        np.testing.assert_array_equal(scores, want_s[pick].astype(np.float32))
                        if mask is not None:  # an id the filter leaves out: the rank it would have
                            out = int(self.ids[~mask][0])
                            s = oracle.scores64(self.C[self.ids == out], self.Q[q:q + 1], metric)[0, 0]
                            ahead = (want_s < s if metric == "l2" else want_s > s) | ((want_s == s) & (want_ids < out))
                            r, sc = index.rank_of(self.Q[q], [out], filter=filt)
                            self.assertEqual(r[0], 1 + ahead.sum())
                            self.assertEqual(sc[0], np.float32(s))

    def test_bad_order_arguments(self):
        index = self.index["inner_product"]
        l2 = self.index["l2"]
        want = index.search(self.Q, 5)

        def check(pattern, *args, error=ValueError, on=index, **kw):
            with self.assertRaisesRegex(error, pattern):
                on.search(*args, **kw)

        check("max_distance is for l2; this index ranks by similarity: give min_score", self.Q, 5, max_distance=3.0)
        check("min_score is for inner_product and cosine; this index ranks by l2 distance", self.Q, 5,
              min_score=3.0, on=l2)
        check(r"give limit or k, not both", self.Q, 5, limit=5)
        check("count_only counts the rows within a bound: give min_score", self.Q, count_only=True)
        check("missing its argument k", self.Q, error=TypeError)
        check(r"k=0 out of range: allowed 1 \.\. 701", self.Q, limit=0)
        check("min_score has 2 entries for 5 queries", self.Q, 5, min_score=[1.0, 2.0])
        check(r"min_score of query 2 = nan is outside float32", self.Q, 5, min_score=[1, 2, float("nan"), 4, 5])
        check(r"min_score of query 0 = 1e\+300 is outside float32", self.Q, 5, min_score=1e300)
        check("min_score of query 0 must be a number, got str", self.Q, 5, min_score="1")
        check("min_score of query 0 must be a number, got bool", self.Q, 5, min_score=True)
        check("search_after has 1 entries for 5 queries", self.Q, 5, search_after=[(1.0, 2)])
        check(r"search_after of query 0 must be \(score, id\)", self.Q, 5, search_after=(1.0, 2, 3))
        check(r"search_after of query 1 must be \(score, id\) .*got None", self.Q[:2], 5,
              search_after=[(1.0, 2), None])
        check("search_after of query 0: the id must be an int64 integer, got 2.5", self.Q, 5, search_after=(1.0, 2.5))
        check("search_after of query 0: the id must be an int64 integer, got 9223372036854775808", self.Q, 5,
              search_after=(1.0, 2**63))
        check("search_after of query 0 score = inf is outside float32", self.Q, 5, search_after=(float("inf"), 2))
        check("search_after distance -1 is negative", self.Q, 5, search_after=(-1.0, 2), on=l2)
        check("out= with count_only", self.Q, min_score=1.0, count_only=True,
              out=(np.zeros((5, 1), np.int64), np.zeros((5, 1), np.float32)))

        def check_rank(pattern, *args, **kw):
            with self.assertRaisesRegex(ValueError, pattern):
                index.rank_of(*args, **kw)

        check_rank(r"ids: unknown id 7 \(no live row has it\)", self.Q[0], [int(self.ids[0]), 7])
        check_rank(r"ids: unknown id 9223372036854775807", self.Q[0], [shardtopk.PAD_ID])
        check_rank(r"ids: 0 ids out of range: allowed 1 \.\. 4", self.Q[0], [])
        check_rank(r"ids: 5 ids out of range: allowed 1 \.\. 4", self.Q[0], self.ids[:5])
        check_rank(r"query must be one vector \[dim\] = \[9\], got shape \(2, 9\)", self.Q[:2], self.ids[:1])
        check_rank(r"query must be float32, got float64", self.Q[0].astype(np.float64), self.ids[:1])
        check_rank("non-finite value", np.full(9, np.nan, np.float32), self.ids[:1])
        check_rank(r"filter: unknown attribute 'x'", self.Q[0], self.ids[:1], filter={"eq": {"x": 1}})
        got = index.search(self.Q, 5)  # nothing changed
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


class FilterTests(unittest.TestCase):
    """filter= (docs/FILTERS.md) against the float64 oracle over the rows that pass: exact ids and
    scores on small integers (ties included, some across the filter boundary), fewer results than
    k padded with PAD_ID, the same bits alone, in a batch and in a batch split by batch_max."""

    @classmethod
    def setUpClass(cls):
        n = 1500
        C = small_int_corpus(n=n, d=16, seed=21)
        C[1000:1100] = C[0:100]  # copies: ties between rows that pass and rows that do not
        cls.C = C
        cls.Q = np.random.default_rng(22).integers(-3, 4, size=(11, 16)).astype(np.float32)
        cls.ids = np.random.default_rng(23).permutation(n).astype(np.int64) * 3 + 1
        r = np.arange(n)
        cls.attrs = {
            "tenant": r // 100,                                 # clustered; the copies are tenant 10
            "tag": (r * 2654435761 + 12345) % 100,              # scattered
            "price": ((r * 40503) % 2000) * 0.25 - 250.0,       # float64
        }
        cls.index = cpu_index(C, ids=cls.ids, metric="l2", k_max=64, batch_max=4, attributes=cls.attrs)

    @classmethod
    def tearDownClass(cls):
        cls.index.close()

    def expect(self, filt, mask, k, metric="l2"):
        ids, scores = self.index.search(self.Q, k, filter=filt)
        n = int(mask.sum())
        want = min(k, n)
        counts = (ids != shardtopk.PAD_ID).sum(axis=1)
        self.assertTrue((counts == want).all(), f"{filt}: counts {counts.tolist()}, {n} rows pass")
        np.testing.assert_array_equal(ids[:, want:], shardtopk.PAD_ID)
        np.testing.assert_array_equal(scores[:, want:], np.inf)  # l2 padding
        if want:
            p = oracle.problems(ids[:, :want], scores[:, :want], self.C[mask], self.ids[mask], self.Q, want, metric,
                                exact=True)
            self.assertEqual(p, [], f"{filt} k={k}")
        return ids, scores

    def test_every_kind_against_the_oracle(self):
        a = self.attrs
        t, g, p = a["tenant"], a["tag"], a["price"]
        none_pass = np.zeros(len(t), bool)
        cases = [
            ({"eq": {"tenant": 3}}, t == 3),
            ({"in": {"tag": [7, 9, 70]}}, np.isin(g, [7, 9, 70])),
            ({"range": {"price": [-10.0, 10.0]}}, (p >= -10) & (p <= 10)),
            ({"range": {"tag": [None, 49]}}, g <= 49),
            ({"range": {"tenant": [10, None]}}, t >= 10),
            ({"ids_in": [int(self.ids[5]), int(self.ids[1005]), 0]}, np.isin(self.ids, [self.ids[5], self.ids[1005]])),
            ({"ids_not_in": [int(x) for x in self.ids[::2]]}, ~np.isin(self.ids, self.ids[::2])),
            ({"all": [{"eq": {"tag": 3}}, {"range": {"tenant": [0, 4]}}]}, (g == 3) & (t <= 4)),
            ({"any": [{"eq": {"tenant": 10}}, {"ids_in": [int(x) for x in self.ids[0:100:2]]}]},
             (t == 10) | np.isin(self.ids, self.ids[0:100:2])),
            ({"not": {"in": {"tenant": [0, 10]}}}, ~np.isin(t, [0, 10])),
            ({"in": {"tenant": [0, 10]}}, np.isin(t, [0, 10])),
            ({"eq": {"tenant": 99}}, none_pass),
            ({"all": []}, ~none_pass),
            ('{"eq": {"tag": 42}}', g == 42),  # JSON text
            ({"eq": {"tenant": np.int64(4)}}, t == 4),  # numpy scalars are taken as numbers
        ]
        for filt, mask in cases:
            for k in (1, 10, 64):
                with self.subTest(filter=str(filt)[:80], k=k):
                    self.expect(filt, mask, k)

    def test_split_batches_give_the_solo_bits(self):
        filt = {"any": [{"eq": {"tenant": 10}}, {"range": {"tag": [90, None]}}]}
        ids, scores = self.index.search(self.Q, 10, filter=filt)  # 11 queries, batch_max 4: 3 pieces
        for q in range(self.Q.shape[0]):
            i1, s1 = self.index.search(self.Q[q], 10, filter=filt)
            np.testing.assert_array_equal(i1[0], ids[q])
            np.testing.assert_array_equal(s1[0].view(np.uint32), scores[q].view(np.uint32))

    def test_info_lists_the_attributes(self):
        info = self.index.info()
        self.assertEqual(info["attributes"], {"tenant": "int64", "tag": "int64", "price": "float64"})
        self.assertEqual(info["max_filters"], 4)

    def test_bad_attributes_are_refused(self):
        C = self.C[:10]
        with self.assertRaisesRegex(ValueError, r"attributes\['a'\] must be 1-D \[rows\]"):
            cpu_index(C, attributes={"a": np.arange(9)})
        with self.assertRaisesRegex(ValueError, r"attributes\['a'\] must hold integers or reals"):
            cpu_index(C, attributes={"a": np.array(["x"] * 10)})
        with self.assertRaisesRegex(ValueError, "NaN"):
            cpu_index(C, attributes={"a": np.full(10, np.nan)})
        with self.assertRaisesRegex(ValueError, "attributes must be a dict"):
            cpu_index(C, attributes=[1, 2])
        with self.assertRaisesRegex(ValueError, "filter: .*'eq' value 1.5 for int64 attribute 'tenant'"):
            self.index.search(self.Q, 3, filter={"eq": {"tenant": 1.5}})


class BuildTests(unittest.TestCase):
    def test_from_arrays_inputs(self):
        C = small_int_corpus(n=50, d=6, seed=12)
        bad = [
            (dict(vectors=C[0]), r"vectors must be 2-D \[rows, dim\], got shape \(6,\)"),
            (dict(vectors=C[:0]), r"vectors are empty: shape \[0, 6\]"),
            (dict(vectors=C.astype(np.complex64)), "vectors must hold real numbers, got dtype complex64"),
            (dict(vectors=C, ids=np.arange(49)), r"ids must be 1-D \[rows\] with one id per row of vectors \(50 rows\)"),
            (dict(vectors=C, ids=np.arange(50) * 0.5), "ids must be integers, got dtype float64"),
            (dict(vectors=C, ids=np.r_[np.arange(49), 3]), "ids are not unique: id 3 appears more than once"),
            (dict(vectors=C, ids=np.r_[np.arange(49), 2**63 - 1]), "is reserved"),
            (dict(vectors=C, metric="dotproduct"), "dotproduct"),
            (dict(vectors=C, dtype="int8"), "int8"),
            (dict(vectors=C, k_max=0), "search.k_max"),
            (dict(vectors=C, batch_max=0), "search.batch_max"),
            (dict(vectors=C, backend="tpu"), "tpu"),
            (dict(vectors=C, engine__nonsense=1), "engine.nonsense"),
            (dict(vectors=C, corpus__path="x.h5"), "corpus.* keys are for Index.open"),
        ]
        nan = C.copy()
        nan[17, 4] = np.nan
        bad.append((dict(vectors=nan), r"corpus row 17 has a non-finite value \(nan\) at column 4"))
        big = C.astype(np.float64)
        big[3, 2] = 1e300
        bad.append((dict(vectors=big), r"corpus row 3 has a non-finite value \(inf\) at column 2 \(after conversion"))
        zero = C.copy()
        zero[9] = 0
        bad.append((dict(vectors=zero, metric="cosine"), "corpus row 9 has zero norm"))
        for kw, pattern in bad:
            kw.setdefault("backend", "cpu")
            with self.subTest(pattern=pattern), np.errstate(over="ignore"):
                with self.assertRaisesRegex(ValueError, pattern):
                    shardtopk.Index.from_arrays(**kw)

    def test_unknown_keywords_are_named_as_keywords_with_the_nearest(self):
        C = small_int_corpus(n=20, d=4, seed=15)
        cases = [
            (dict(metrc="cosine"), r"Index\.from_arrays\(\): unknown keyword argument 'metrc'; did you mean 'metric'\?"),
            (dict(k_mx=3), r"unknown keyword argument 'k_mx'; did you mean 'k_max'\?"),
            (dict(threads=2), r"unknown keyword argument 'threads'; did you mean 'engine__threads'\?"),
        ]
        for kw, pattern in cases:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(TypeError, pattern) as caught:
                    shardtopk.Index.from_arrays(C, backend="cpu", **kw)
                self.assertNotIn("unknown key '", str(caught.exception))
        with self.assertRaisesRegex(TypeError, r"unknown keyword argument 'xyzzy' \(its arguments: vectors, ids"):
            shardtopk.Index.from_arrays(C, backend="cpu", xyzzy=1)
        with self.assertRaisesRegex(TypeError, r"Index\.open\(\): unknown keyword argument 'metrc'; did you mean 'search__metric'\?"):
            example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "example.yaml")
            shardtopk.Index.open(example, metrc="l2")
        # a dotted name is a config key: its message, with the nearest key
        with self.assertRaisesRegex(ValueError, r"unknown key 'engine\.thread'; did you mean 'engine\.threads'\?"):
            shardtopk.Index.from_arrays(C, backend="cpu", engine__thread=2)

    def test_from_arrays_converts_and_reports(self):
        C = small_int_corpus(n=64, d=10, seed=13)
        with shardtopk.Index.from_arrays(C.astype(np.int16).tolist(), metric="l2", dtype="float16", k_max=8,
                                         batch_max=4, backend="cpu") as index:
            info = index.info()
            for key, value in dict(rows=64, dim=10, metric="l2", dtype="float16", engine="cpu", device="cpu",
                                   ranks=1, rank=0, k_max=8, batch_max=4).items():
                self.assertEqual(info[key], value, key)
            self.assertEqual((index.rank, index.ranks, index.dim, index.closed), (0, 1, 10, False))
            self.assertIn("rows=64", repr(index))
            ids, s = index.search(C[:5], 8)
            self.assertEqual(oracle.problems(ids, s, C, np.arange(64), C[:5], 8, "l2", exact=True), [])
        self.assertTrue(index.closed)

    def test_open_from_a_config(self):
        import h5py

        rng = np.random.default_rng(14)
        C = rng.integers(-3, 4, size=(777, 20)).astype(np.float32)
        ids = (rng.permutation(777) * 11).astype(np.int64)
        Q = rng.integers(-3, 4, size=(5, 20)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            corpus = os.path.join(tmp, "corpus.h5")
            with h5py.File(corpus, "w") as f:
                f["emb/vectors"] = C
                f["emb/ids"] = ids
                f.attrs["distance"] = "euclidean"  # -> l2
            cfg = os.path.join(tmp, "c.yaml")
            with open(cfg, "w") as f:
                f.write(f"corpus:\n  path: {corpus}\n  dataset: emb/vectors\n  ids_dataset: emb/ids\n"
                        "search:\n  k_max: 100\n")
            with shardtopk.Index.open(cfg, engine__backend="cpu", **{"engine.threads": 2}) as index:
                self.assertEqual(index.info()["metric"], "l2")
                got_ids, got_s = index.search(Q, 30)
                self.assertEqual(oracle.problems(got_ids, got_s, C, ids, Q, 30, "l2", exact=True), [])
            with shardtopk.Index.open(cfg, engine__backend="cpu", search__metric="inner_product",
                                      search__batch_max=2) as index:
                got_ids, got_s = index.search(Q, 30)
                self.assertEqual(oracle.problems(got_ids, got_s, C, ids, Q, 30, "inner_product", exact=True), [])
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                shardtopk.Index.open(cfg, engine__backend="cpu", search__metric="euclidean").close()
            self.assertTrue(any(issubclass(x.category, FutureWarning) and "euclidean" in str(x.message) for x in w))
            with self.assertRaisesRegex(ValueError, "search.k_max"):
                shardtopk.Index.open(cfg, search__k_max=-1)
            with self.assertRaisesRegex(ValueError, "engine.nonsense"):
                shardtopk.Index.open(cfg, engine__nonsense="x")
            with self.assertRaisesRegex(ValueError, "override corpus.attributes=.*not a config value"):
                shardtopk.Index.open(cfg, corpus__attributes={"a": 1})
            with self.assertRaisesRegex(ValueError, "missing.h5"):
                shardtopk.Index.open(cfg, engine__backend="cpu", corpus__path=os.path.join(tmp, "missing.h5"))
            with self.assertRaisesRegex(ValueError, "no_such_dataset"):
                shardtopk.Index.open(cfg, engine__backend="cpu", corpus__dataset="no_such_dataset")
            with self.assertRaisesRegex(ValueError, "nope.yaml"):
                shardtopk.Index.open(os.path.join(tmp, "nope.yaml"))

    def test_same_answers_as_the_command_line(self):
        if not ARGS.cli:
            self.skipTest("no --cli given")
        import h5py

        rng = np.random.default_rng(15)
        C = rng.standard_normal((1500, 33)).astype(np.float32)
        Q = rng.standard_normal((17, 33)).astype(np.float32)
        with tempfile.TemporaryDirectory() as tmp:
            corpus, queries, results = (os.path.join(tmp, n) for n in ("c.h5", "q.h5", "r.h5"))
            with h5py.File(corpus, "w") as f:
                f["train"] = C
            with h5py.File(queries, "w") as f:
                f["test"] = Q
            cfg = os.path.join(tmp, "c.yaml")
            with open(cfg, "w") as f:
                f.write(f"corpus:\n  path: {corpus}\nsearch:\n  metric: cosine\n  batch_max: 5\n")
            sets = ["--set", "engine.backend=cpu", "--set", "engine.dtype=bfloat16"]
            subprocess.run([ARGS.cli, "search", "-c", cfg, "-q", queries, "--queries-dataset", "test", "-k", "9",
                            "-o", results] + sets, check=True, capture_output=True)
            with h5py.File(results, "r") as f:
                cli_ids, cli_s = f["ids"][()], f["scores"][()]
            with shardtopk.Index.open(cfg, engine__backend="cpu", engine__dtype="bfloat16") as index:
                ids, s = index.search(Q, 9)
        np.testing.assert_array_equal(ids, cli_ids)
        np.testing.assert_array_equal(s.view(np.uint32), cli_s.view(np.uint32))


class MpiTests(unittest.TestCase):
    """Two ranks under mpiexec: rank 0 searches, rank 1 follows; answers as on one rank."""

    def run_app(self, scenario, ranks=2, config=None):
        if not ARGS.mpiexec:
            self.skipTest("no --mpiexec given")
        tmp = tempfile.mkdtemp()
        prefix = os.path.join(tmp, "run")
        cmd = [ARGS.mpiexec, "-n", str(ranks)] + shlex.split(ARGS.mpiexec_flags) + [
            sys.executable, os.path.join(HERE, "mpi_app.py"), "--module-dir", ARGS.module_dir, "--out", prefix,
            "--scenario", scenario]
        if config:
            cmd += ["--config", config]
        env = dict(os.environ, SHARDTOPK_LOG_LEVEL="warn")
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        status = []
        for r in range(ranks):
            path = f"{prefix}.rank{r}.json"
            self.assertTrue(os.path.exists(path), f"rank {r} wrote nothing; rc {p.returncode}\n{p.stdout}\n{p.stderr}")
            with open(path) as f:
                status.append(json.load(f))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        answers = dict(np.load(prefix + ".npz")) if os.path.exists(prefix + ".npz") else None
        return status, answers

    def single_rank_answers(self):
        sys.path.insert(0, HERE)
        import mpi_app

        vectors, ids, queries = mpi_app.corpus()
        with shardtopk.Index.from_arrays(vectors, ids=ids, backend="cpu", batch_max=8, engine__threads=1,
                                         attributes=mpi_app.attributes()) as index:
            a = index.search(queries[:3], 10)
            b = index.search(queries, 10)
            f = index.search(queries, 10, filter=mpi_app.FILTER)
        self.assertEqual(oracle.problems(b[0], b[1], vectors, ids, queries, 10, "inner_product", exact=True), [])
        tenant = mpi_app.attributes()["tenant"]
        mask = np.isin(tenant, [2, 9]) | np.isin(ids, [5, 8, 11])
        self.assertEqual(oracle.problems(f[0], f[1], vectors[mask], ids[mask], queries, 10, "inner_product",
                                         exact=True), [])
        with shardtopk.Index.from_arrays(vectors, ids=ids, backend="cpu", batch_max=8, engine__threads=1,
                                         attributes=mpi_app.attributes()) as index:
            order = mpi_app.order_answers(index, queries, True)
        # against the oracle: the range's totals, the second page, the ranks
        S = oracle.scores64(vectors, queries, "inner_product")
        np.testing.assert_array_equal(order["total_r"], (S >= mpi_app.MIN_SCORE).sum(axis=1))
        np.testing.assert_array_equal(order["total_f"], (S[:, mask] >= mpi_app.MIN_SCORE).sum(axis=1))
        self.assertTrue((order["passing_f"] == mask.sum()).all())
        want14, _ = oracle.topk(vectors, ids, queries, 14, "inner_product")
        np.testing.assert_array_equal(order["ids_p"], want14[:, 7:])
        o = oracle.order(S[0], ids, "inner_product")
        pos = {int(i): r for r, i in enumerate(ids[o])}
        np.testing.assert_array_equal(order["ranks_o"], [pos[int(ids[r])] + 1 for r in mpi_app.RANK_ROWS])
        return a, b, f, order

    def check_answers(self, status, answers, ranks=2):
        self.assertTrue(all(s["ok"] for s in status), status)
        self.assertEqual([s["info"]["ranks"] for s in status], [ranks] * ranks)
        self.assertEqual([s["info"]["rank"] for s in status], list(range(ranks)))
        self.assertTrue(status[0]["closed"])
        self.assertRegex(status[0]["bad_query"], r"query 1 of the batch has a non-finite value \(inf\) at column 4")
        a, b, f, order = self.single_rank_answers()
        pairs = [(("ids_a", "scores_a"), a), (("ids_b", "scores_b"), b)]
        if "ids_f" in answers:  # from_arrays: with attributes, a filtered search too
            pairs.append((("ids_f", "scores_f"), f))
        for got, want in pairs:
            np.testing.assert_array_equal(answers[got[0]], want[0])
            np.testing.assert_array_equal(answers[got[1]].view(np.uint32), want[1].view(np.uint32))
        # ranges, pages, counts and ranks: the single rank's, bit for bit (rows_scanned: every rank's)
        for name, want in order.items():
            if name in answers or not name.endswith("_f"):
                got = answers[name]
                self.assertEqual(got.dtype, want.dtype, name)
                np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), name)

    def test_follow(self):
        status, answers = self.run_app("follow")
        self.check_answers(status, answers)
        self.assertTrue(status[1]["closed"])

    def test_four_ranks(self):
        status, answers = self.run_app("follow", ranks=4)
        self.check_answers(status, answers, ranks=4)

    def test_followers_close_or_leave(self):
        for scenario in ("close", "with", "exit"):
            with self.subTest(scenario=scenario):
                status, answers = self.run_app(scenario)
                self.check_answers(status, answers)

    def test_open_two_ranks(self):
        import h5py
        import mpi_app

        vectors, ids, _ = mpi_app.corpus()
        with tempfile.TemporaryDirectory() as tmp:
            corpus = os.path.join(tmp, "c.h5")
            with h5py.File(corpus, "w") as f:
                f["train"] = vectors
                f["ids"] = ids
            cfg = os.path.join(tmp, "c.yaml")
            with open(cfg, "w") as f:
                f.write(f"corpus:\n  path: {corpus}\n  ids_dataset: ids\nsearch:\n  metric: inner_product\n")
            status, answers = self.run_app("open", config=cfg)
        self.check_answers(status, answers)

    def test_ranks_with_other_arrays_fail_together(self):
        status, answers = self.run_app("mismatch")
        self.assertIsNone(answers)
        for s in status:
            self.assertFalse(s["ok"], s)
            self.assertIn(s["type"], ("ValueError", "RemoteError"))
            self.assertRegex(s["message"], r"rank 1 passed \[1000, 19\] but rank [01] passed|rank 0 passed \[1001, 19\]")


def main():
    global ARGS, shardtopk
    ap = argparse.ArgumentParser()
    ap.add_argument("--module-dir", required=True, help="folder holding shardtopk*.so")
    ap.add_argument("--cli", help="the shardtopk command-line binary (answers compared with it)")
    ap.add_argument("--mpiexec", help="mpiexec for the 2-rank runs")
    ap.add_argument("--mpiexec-flags", default="", help="extra mpiexec flags, one string")
    ARGS, rest = ap.parse_known_args()
    ARGS.module_dir = os.path.abspath(ARGS.module_dir)
    sys.path.insert(0, ARGS.module_dir)
    import shardtopk as module

    shardtopk = module
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
