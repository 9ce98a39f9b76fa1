"""The Python module's device path on a GPU: torch, CuPy (and JAX) arrays in and out.

    python3 tests/python/test_gpu.py --module-dir build/python [--cli build/src/shardtopk] [unittest args]

Without a GPU (or a module built without CUDA) it prints "no GPU visible" and exits 0, which
CTest counts as skipped (test_python_gpu, label gpu). What it checks:
  - torch and CuPy queries -> DeviceArray answers that torch/CuPy take with from_dlpack,
    bit-identical to the host path of the same index, and to `shardtopk search` for the same
    queries; within eps of the float64 oracle;
  - out= preallocated tensors; stream= as an int, a torch.cuda.Stream, a cupy.cuda.Stream; the
    producer's current stream by default (a side stream included);
  - no host synchronisation: with a long kernel queued first on the stream, the call returns
    while that kernel still runs (an event recorded after it is not complete), and a torch
    kernel queued after the call on the same stream consumes the answer;
  - a device query with NaN/Inf (or zero norm under cosine) gets ids -1 and NaN scores in its
    row, the other rows their answers; bad device inputs raise ValueError.
"""

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX must not take the GPU's memory

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

ARGS = None
shardtopk = None
torch = None

K = 20
CONFIGS = [("inner_product", "float32"), ("cosine", "float16"), ("l2", "bfloat16")]


def corpus(seed=21, rows=20011, dim=96, queries=70):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((rows, dim)).astype(np.float32)
    Q = rng.standard_normal((queries, dim)).astype(np.float32)
    return C, Q


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


class DevicePathTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.C, cls.Q = corpus()
        cls.indexes = {c: shardtopk.Index.from_arrays(cls.C, metric=c[0], dtype=c[1], k_max=256, batch_max=32,
                                                      backend="cuda") for c in CONFIGS}

    @classmethod
    def tearDownClass(cls):
        for index in cls.indexes.values():
            index.close()

    def host(self, index, q, k=K):
        return index.search(np.ascontiguousarray(q), k)

    def assert_same(self, device_ids, device_scores, host, what):
        np.testing.assert_array_equal(device_ids, host[0], err_msg=what)
        np.testing.assert_array_equal(bits(device_scores), bits(host[1]), err_msg=what)

    def test_torch_in_torch_out(self):
        for cfg, index in self.indexes.items():
            self.assertEqual(index.info()["engine"], "cuda")
            for batch in (1, 7, 70):  # 70: searched 32 at a time
                q = torch.from_numpy(self.Q[:batch]).cuda()
                ids, scores = index.search(q, K)
                self.assertIsInstance(ids, shardtopk.DeviceArray)
                self.assertEqual((ids.shape, ids.dtype, scores.dtype), ((batch, K), "int64", "float32"))
                self.assertEqual(ids.__dlpack_device__(), (2, torch.cuda.current_device()))
                ti, ts = torch.from_dlpack(ids), torch.from_dlpack(scores)
                self.assertEqual((ti.dtype, ts.dtype, tuple(ti.shape)), (torch.int64, torch.float32, (batch, K)))
                self.assert_same(ti.cpu().numpy(), ts.cpu().numpy(), self.host(index, self.Q[:batch]), f"{cfg} B={batch}")
            ids1, _ = index.search(torch.from_numpy(self.Q[3]).cuda(), K)  # 1-D: a batch of one
            self.assertEqual(ids1.shape, (1, K))

    def test_against_the_oracle(self):
        ids_all = np.arange(self.C.shape[0])
        for (metric, dtype), index in self.indexes.items():
            ids, scores = index.search(torch.from_numpy(self.Q[:9]).cuda(), K)
            ids, scores = ids.numpy(), scores.numpy()
            if metric == "cosine":
                stored = oracle.round_to_storage(oracle.normalize64(self.C).astype(np.float32), dtype)
                p = oracle.problems(ids, scores, stored, ids_all, oracle.normalize64(self.Q[:9]), K, "inner_product")
            else:
                p = oracle.problems(ids, scores, oracle.round_to_storage(self.C, dtype), ids_all, self.Q[:9], K, metric)
            self.assertEqual(p, [], f"{metric} {dtype}")

    def test_out_preallocated(self):
        index = self.indexes[CONFIGS[0]]
        q = torch.from_numpy(self.Q[:5]).cuda()
        ids = torch.empty((5, K), dtype=torch.int64, device="cuda")
        scores = torch.empty((5, K), dtype=torch.float32, device="cuda")
        got = index.search(q, K, out=(ids, scores))
        self.assertIs(got[0], ids)
        self.assertIs(got[1], scores)
        self.assert_same(ids.cpu().numpy(), scores.cpu().numpy(), self.host(index, self.Q[:5]), "out=")
        with self.assertRaisesRegex(ValueError, r"out\[1\] \(scores\) must be float32"):
            index.search(q, K, out=(ids, scores.double()))
        with self.assertRaisesRegex(ValueError, r"out\[0\] \(ids\) must have shape \[5, 20\]"):
            index.search(q, K, out=(ids[:4], scores[:4]))
        with self.assertRaisesRegex(ValueError, r"out\[0\] \(ids\) must be on cuda"):
            index.search(q, K, out=(ids.cpu(), scores))

    def test_no_host_synchronisation(self):
        """batch 1 on one rank: the call returns while a long kernel queued before it still runs."""
        index = self.indexes[CONFIGS[1]]
        q = torch.from_numpy(self.Q[:1]).cuda()
        want = self.host(index, self.Q[:1])
        rows = torch.from_numpy(self.C).cuda()
        for _ in range(3):  # warm: graphs captured, pool filled
            index.search(q, K)
        torch.cuda.synchronize()
        stream = torch.cuda.current_stream()
        torch.cuda._sleep(2_000_000_000)  # about a second of GPU clock cycles on this stream
        slept = torch.cuda.Event()
        slept.record(stream)
        ids, scores = index.search(q, K)
        still_sleeping = not slept.query()
        # A torch kernel on the same stream consumes the answer, after the search.
        ti = torch.from_dlpack(ids)
        picked = rows[ti[0]].sum(dim=1)
        total = ti.sum()
        self.assertTrue(still_sleeping, "the call waited for the work queued before it")
        torch.cuda.synchronize()
        self.assert_same(ti.cpu().numpy(), torch.from_dlpack(scores).cpu().numpy(), want, "after the sleep")
        self.assertEqual(int(total.item()), int(want[0].sum()))
        np.testing.assert_allclose(picked.cpu().numpy(), self.C[want[0][0]].sum(axis=1), rtol=1e-5)

    def test_streams(self):
        index = self.indexes[CONFIGS[2]]
        want = self.host(index, self.Q[:3])
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            q = torch.from_numpy(self.Q[:3]).cuda()  # produced on the side stream
            ids, scores = index.search(q, K)  # ordered there: the producer's current stream
            self.assertEqual(ids.stream, side.cuda_stream)
            doubled = torch.from_dlpack(scores) * 2  # consumed there too
        ti = torch.from_dlpack(ids)  # consumed on the default stream: made to wait for the side stream
        torch.cuda.synchronize()
        self.assert_same(ti.cpu().numpy(), (doubled / 2).cpu().numpy(), want, "side stream")
        q = torch.from_numpy(self.Q[:3]).cuda()
        torch.cuda.synchronize()
        for s, handle in ((side, side.cuda_stream), (side.cuda_stream, side.cuda_stream), (0, 0)):
            ids, scores = index.search(q, K, stream=s)
            self.assertEqual(ids.stream, handle)
            torch.cuda.synchronize()
            self.assert_same(ids.numpy(), scores.numpy(), want, f"stream={s!r}")
        self.assertEqual(index.search(q, K)[0].stream, torch.cuda.current_stream().cuda_stream)
        with self.assertRaisesRegex(ValueError, "stream= takes an int"):
            index.search(q, K, stream="fast")

    def test_invalid_device_queries(self):
        for cfg, index in self.indexes.items():
            q = self.Q[:5].copy()
            q[1, 3] = np.nan
            q[3, 0] = np.inf
            if cfg[0] == "cosine":
                q[4] = 0
            ids, scores = index.search(torch.from_numpy(q).cuda(), K)
            ids, scores = ids.numpy(), scores.numpy()
            bad = [1, 3] + ([4] if cfg[0] == "cosine" else [])
            for r in range(5):
                if r in bad:
                    self.assertTrue((ids[r] == shardtopk.PAD_ID).all(), f"{cfg} row {r}: {ids[r]}")
                    self.assertTrue(np.isnan(scores[r]).all(), f"{cfg} row {r}")
                else:
                    self.assert_same(ids[r:r + 1], scores[r:r + 1], self.host(index, self.Q[r:r + 1]), f"{cfg} row {r}")
            with self.assertRaisesRegex(ValueError, "non-finite"):
                self.host(index, q)  # the host path names it instead

    def test_bad_device_inputs(self):
        index = self.indexes[CONFIGS[0]]
        q = torch.from_numpy(self.Q[:4]).cuda()
        for bad, pattern in ((q.half(), "queries must be float32, got float16"),
                             (q.double(), "queries must be float32, got float64"),
                             (q[:, ::2].contiguous(), "queries have dimension 48 but the index has dimension 96"),
                             (torch.cat([q, q], dim=1)[:, ::2], "C-contiguous"),
                             (q.t(), "C-contiguous")):
            with self.assertRaisesRegex(ValueError, pattern):
                index.search(bad, K)
        with self.assertRaisesRegex(ValueError, r"k=0 out of range"):
            index.search(q, 0)
        with self.assertRaisesRegex(ValueError, r"k=257 out of range: allowed 1 \.\. 256"):
            index.search(q, 257)
        with shardtopk.Index.from_arrays(self.C[:100], backend="cpu") as cpu:
            with self.assertRaisesRegex(ValueError, "runs on the cpu engine"):
                cpu.search(q, 5)
        empty_ids, empty_scores = index.search(q[:0], K)
        self.assertEqual((empty_ids.shape, empty_scores.shape), ((0, K), (0, K)))

    def test_same_answers_as_the_command_line(self):
        if not ARGS.cli:
            self.skipTest("no --cli given")
        import h5py

        Q = self.Q[:23]
        with tempfile.TemporaryDirectory() as tmp:
            paths = {n: os.path.join(tmp, n) for n in ("c.h5", "q.h5", "r.h5", "c.yaml")}
            with h5py.File(paths["c.h5"], "w") as f:
                f["train"] = self.C
            with h5py.File(paths["q.h5"], "w") as f:
                f["test"] = Q
            with open(paths["c.yaml"], "w") as f:
                f.write(f"corpus:\n  path: {paths['c.h5']}\nsearch:\n  metric: l2\n  batch_max: 8\n"
                        "engine:\n  backend: cuda\n  dtype: float16\n")
            subprocess.run([ARGS.cli, "search", "-c", paths["c.yaml"], "-q", paths["q.h5"], "--queries-dataset",
                            "test", "-k", str(K), "-o", paths["r.h5"]], check=True, capture_output=True)
            with h5py.File(paths["r.h5"], "r") as f:
                cli = f["ids"][()], f["scores"][()]
            with shardtopk.Index.open(paths["c.yaml"]) as index:
                ids, scores = index.search(torch.from_numpy(Q).cuda(), K)
                self.assert_same(ids.numpy(), scores.numpy(), cli, "device path vs CLI")
                self.assert_same(*index.search(Q, K), cli, "host path vs CLI")

    def test_cupy(self):
        try:
            import cupy
        except ImportError:
            self.skipTest("cupy is not installed")
        index = self.indexes[CONFIGS[1]]
        want = self.host(index, self.Q[:6])
        q = cupy.asarray(self.Q[:6])
        ids, scores = index.search(q, K)
        ci, cs = cupy.from_dlpack(ids), cupy.from_dlpack(scores)
        self.assert_same(cupy.asnumpy(ci), cupy.asnumpy(cs), want, "cupy")
        self.assert_same(cupy.asnumpy(cupy.asarray(ids)), cupy.asnumpy(cupy.asarray(scores)), want,
                         "__cuda_array_interface__")
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            q2 = cupy.asarray(self.Q[:6])
            ids2, scores2 = index.search(q2, K)  # cupy's current stream
            self.assertEqual(ids2.stream, s.ptr)
        ids3, _ = index.search(q2, K, stream=s)
        self.assertEqual(ids3.stream, s.ptr)
        s.synchronize()
        self.assert_same(ids2.numpy(), scores2.numpy(), want, "cupy stream")
        ids4, scores4 = index.search(q, K, out=(cupy.empty((6, K), cupy.int64), cupy.empty((6, K), cupy.float32)))
        self.assert_same(cupy.asnumpy(ids4), cupy.asnumpy(scores4), want, "cupy out=")
        # Answers outlive the stream object they were made on: their memory is given back on that
        # stream, which the answers keep alive (a freed stream handle would crash the free).
        for how in ("current", "stream="):
            t = cupy.cuda.Stream(non_blocking=True)
            with t:
                q5 = cupy.asarray(self.Q[:6])
                ids5, scores5 = index.search(q5, K) if how == "current" else index.search(q5, K, stream=t)
            t.synchronize()
            del t
            gc.collect()
            self.assert_same(ids5.numpy(), scores5.numpy(), want, f"cupy stream dropped first ({how})")
            del ids5, scores5
            gc.collect()

    def test_jax(self):
        try:
            import jax
            import jax.numpy as jnp
            if not jax.devices("gpu"):
                raise RuntimeError("no JAX GPU device")
        except Exception as e:  # JAX missing, or without its CUDA plug-in
            self.skipTest(f"JAX on the GPU unavailable: {e}")
        index = self.indexes[CONFIGS[0]]
        want = self.host(index, self.Q[:4])
        q = jax.device_put(jnp.asarray(self.Q[:4]), jax.devices("gpu")[0])
        ids, scores = index.search(q, K)
        self.assert_same(np.asarray(jax.dlpack.from_dlpack(ids)), np.asarray(jax.dlpack.from_dlpack(scores)), want,
                         "jax")


def main():
    global ARGS, shardtopk, torch
    ap = argparse.ArgumentParser()
    ap.add_argument("--module-dir", required=True)
    ap.add_argument("--cli")
    ARGS, rest = ap.parse_known_args()
    sys.path.insert(0, os.path.abspath(ARGS.module_dir))
    import shardtopk as module

    shardtopk = module
    if not shardtopk.built_with_cuda():
        print("no GPU visible: this shardtopk module was built without CUDA (SHARDTOPK_CUDA=OFF); skipped")
        return 0
    if not shardtopk.cuda_available():
        print("no GPU visible; skipped")
        return 0
    import torch as t  # a GPU machine for this suite has PyTorch; its absence is a failure

    torch = t
    if not torch.cuda.is_available():
        print("shardtopk sees a GPU but torch does not", file=sys.stderr)
        return 1
    prog = unittest.main(argv=[sys.argv[0]] + rest, verbosity=2, exit=False)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
