"""shardtopk's Python updates (upsert, remove, remove_matching, snapshot) against the float64 oracle
over the live rows, on the CPU engine: small-integer rows (exact scores, many ties, on purpose
between old and new rows), re-inserted ids, deletes by id and by filter, deleting everything, a
restart from a snapshot plus the log, bad input, and two ranks under mpiexec.

    python3 test_updates.py --module-dir build/python [--mpiexec mpiexec --mpiexec-flags "..."]
    python3 test_updates.py --module-dir DIR --child OUT DIR   (the two-rank program, under mpiexec)
"""

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402

ARGS = None
shardtopk = None
D = 13


class Model:
    """The live rows as the index should hold them: id -> (row, tenant)."""

    def __init__(self, C, ids, tenant):
        self.rows = {int(i): (C[j].copy(), int(tenant[j])) for j, i in enumerate(ids)}

    def upsert(self, ids, vectors, tenant):
        for j, i in enumerate(ids):
            self.rows[int(i)] = (np.asarray(vectors[j], np.float32).copy(), int(tenant[j]))

    def remove(self, ids):
        n = 0
        for i in ids:
            n += self.rows.pop(int(i), None) is not None
        return n

    def arrays(self):
        ids = np.array(sorted(self.rows), dtype=np.int64)
        C = np.array([self.rows[i][0] for i in ids], dtype=np.float32).reshape(len(ids), D)
        t = np.array([self.rows[i][1] for i in ids], dtype=np.int64)
        return C, ids, t


def corpus(n=500, seed=3):
    rng = np.random.default_rng(seed)
    C = rng.integers(-2, 3, size=(n, D)).astype(np.float32)
    ids = rng.permutation(n).astype(np.int64) * 5 + 11  # not row positions: ties break by these
    tenant = np.arange(n) % 7
    Q = rng.integers(-2, 3, size=(6, D)).astype(np.float32)
    return C, ids, tenant, Q


def script():
    """The writes every test replays (single rank and two ranks): (op, args)."""
    rng = np.random.default_rng(9)
    C, ids, _, _ = corpus()
    ops = []
    new_ids = np.arange(5000, 5060, dtype=np.int64)
    new_rows = C[rng.integers(0, len(C), 60)]  # copies of old rows: ties across old and new
    ops.append(("upsert", new_ids, new_rows, np.full(60, 9)))
    ops.append(("upsert", ids[:20], rng.integers(-2, 3, size=(20, D)).astype(np.float32), np.full(20, 8)))  # replace
    ops.append(("remove", np.concatenate([ids[20:70], [123456789]])))  # one id that is not live
    ops.append(("remove_matching", {"eq": {"tenant": 3}}))
    ops.append(("upsert", ids[25:30], C[25:30] * 0 + 2, np.full(5, 3)))  # re-insert deleted ids
    return ops


def apply(index, model, op):
    """Runs op on the index and the model; returns (answer, expected count)."""
    kind = op[0]
    if kind == "upsert":
        _, i, v, t = op
        model.upsert(i, v, t)
        return index.upsert(i, v, attributes={"tenant": t}), len(i)
    if kind == "remove":
        return index.remove(op[1]), model.remove(op[1])
    C, ids, t = model.arrays()
    gone = ids[t == op[1]["eq"]["tenant"]]
    return index.remove_matching(op[1]), model.remove(gone)


def cpu_index(C, ids, tenant, **kw):
    kw.setdefault("engine__threads", 1)
    return shardtopk.Index.from_arrays(C, ids=ids, backend="cpu", attributes={"tenant": tenant}, k_max=1024, **kw)


class TwoRankTests(unittest.TestCase):
    """Runs before UpdateTests (unittest orders classes by name): mpiexec is started before this
    process initialises MPI for its own indexes, as test_module.py's MpiTests are."""

    def test_two_ranks(self):
        if not ARGS.mpiexec:
            self.skipTest("no --mpiexec given")
        C, ids, tenant, Q = corpus()
        model = Model(C, ids, tenant)
        for op in script():
            apply_model_only(model, op)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "answers")
            cmd = [ARGS.mpiexec, "-n", "2", *shlex.split(ARGS.mpiexec_flags), sys.executable, os.path.abspath(__file__),
                   "--module-dir", ARGS.module_dir, "--child", out, os.path.join(tmp, "store")]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            got = np.load(out + ".npz")
        Cm, idm, _ = model.arrays()
        p = oracle.problems(got["ids"], got["scores"], Cm, idm, Q, 10, "l2", exact=True)
        self.assertEqual(p, [], "two ranks after every write")
        self.assertEqual(int(got["live"]), len(model.rows))


class UpdateTests(unittest.TestCase):
    def check(self, index, model, Q, what):
        C, ids, _ = model.arrays()
        metric = index.info()["metric"]
        for k in sorted({1, min(10, len(ids)), len(ids)} - {0}):
            got_ids, got_s = index.search(Q, k)
            p = oracle.problems(got_ids, got_s, C, ids, Q, k, metric, exact=True)
            self.assertEqual(p, [], f"{what}, k={k}")

    def test_writes_against_the_oracle(self):
        C, ids, tenant, Q = corpus()
        for metric in ("inner_product", "l2"):
            with self.subTest(metric=metric), tempfile.TemporaryDirectory() as tmp:
                model = Model(C, ids, tenant)
                with cpu_index(C, ids, tenant, metric=metric, storage__dir=tmp, storage__capacity_rows=600) as index:
                    self.assertTrue(index.info()["writable"])
                    seq = 0
                    for n, op in enumerate(script()):
                        got, want = apply(index, model, op)
                        key = "upserted" if op[0] == "upsert" else "deleted"
                        self.assertEqual(got[key], want, f"op {n} {op[0]}")
                        self.assertGreater(got["seq"], seq, f"op {n}: seq increases")
                        seq = got["seq"]
                        self.check(index, model, Q, f"{metric} after op {n} ({op[0]})")
                    info = index.info()
                    self.assertEqual(info["live_rows"], len(model.rows))
                    self.assertEqual(info["applied_seq"], seq)

    def test_restart_from_snapshot_and_log(self):
        import h5py

        C, ids, tenant, Q = corpus()
        model = Model(C, ids, tenant)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "c.h5")
            with h5py.File(path, "w") as f:
                f["train"] = C
                f["ids"] = ids
                f["tenant"] = tenant.astype(np.int64)
            cfg = os.path.join(tmp, "c.yaml")
            with open(cfg, "w") as f:
                f.write(f"corpus:\n  path: {path}\n  ids_dataset: ids\n  attributes: [tenant]\n"
                        f"search:\n  metric: l2\nstorage:\n  dir: {tmp}/store\n  capacity_rows: 600\n")
            ops = script()
            with shardtopk.Index.open(cfg, engine__backend="cpu", engine__threads=1) as index:
                for op in ops[:2]:
                    apply(index, model, op)
                snap = index.snapshot()
                self.assertEqual(snap["rows"], len(model.rows))
                self.assertTrue(os.path.exists(snap["path"]), snap)
                for op in ops[2:]:
                    apply(index, model, op)
                self.check(index, model, Q, "before the restart")
            with shardtopk.Index.open(cfg, engine__backend="cpu", engine__threads=1) as index:
                self.assertEqual(index.info()["snapshot_seq"], snap["seq"])
                self.assertEqual(index.info()["live_rows"], len(model.rows))
                self.check(index, model, Q, "after the restart (snapshot + log)")

    def test_delete_everything_then_insert(self):
        C, ids, tenant, Q = corpus(n=40)
        model = Model(C, ids, tenant)
        with tempfile.TemporaryDirectory() as tmp, cpu_index(C, ids, tenant, storage__dir=tmp) as index:
            self.assertEqual(index.remove_matching({"all": []})["deleted"], 40)
            model.rows.clear()
            got, _ = index.search(Q, 5)
            np.testing.assert_array_equal(got, shardtopk.PAD_ID)
            apply(index, model, ("upsert", np.array([7, 3]), C[:2], np.array([1, 1])))
            self.check(index, model, Q, "two rows after deleting everything")

    def test_many_rows_per_call(self):
        """upsert takes [n, d] rows and remove [n] ids in one call each (one log record each, no
        loop in Python): 100k rows in, then a million ids out, against the oracle."""
        C, ids, tenant, Q = corpus(n=50)
        n = 100_000
        rng = np.random.default_rng(17)
        new_ids = np.arange(10**9, 10**9 + n, dtype=np.int64)
        rows = rng.integers(-2, 3, size=(n, D)).astype(np.float32)
        tenants = np.arange(n, dtype=np.int64) % 7
        with tempfile.TemporaryDirectory() as tmp, \
                cpu_index(C, ids, tenant, storage__dir=tmp, storage__capacity_rows=n + 1000) as index:
            seq0 = index.info()["applied_seq"]
            r = index.upsert(new_ids, rows, attributes={"tenant": tenants})
            self.assertEqual(r, {"upserted": n, "seq": seq0 + 1})
            self.assertEqual(index.info()["live_rows"], 50 + n)
            allC = np.concatenate([C, rows])
            allids = np.concatenate([ids, new_ids])
            got_ids, got_s = index.search(Q, 10)
            self.assertEqual(oracle.problems(got_ids, got_s, allC, allids, Q, 10, index.info()["metric"], exact=True), [])
            # a million ids: every new row, two old ones, and ids that are not live
            many = np.concatenate([new_ids, ids[:2], np.arange(2 * 10**9, 2 * 10**9 + 10**6 - n - 2, dtype=np.int64)])
            self.assertEqual(len(many), 10**6)
            r = index.remove(many)
            self.assertEqual(r, {"deleted": n + 2, "seq": seq0 + 2})
            self.assertEqual(index.info()["live_rows"], 48)
            got_ids, got_s = index.search(Q, 10)
            self.assertEqual(oracle.problems(got_ids, got_s, C[2:], ids[2:], Q, 10, index.info()["metric"], exact=True), [])

    def test_snapshot_policy(self):
        C, ids, tenant, Q = corpus(n=60)
        model = Model(C, ids, tenant)
        with tempfile.TemporaryDirectory() as tmp, \
                cpu_index(C, ids, tenant, storage__dir=tmp, storage__snapshot_log_bytes=1500) as index:
            snapshots = set()
            for i in range(30):
                apply(index, model, ("upsert", np.array([9000 + i]), C[i:i + 1] + 1, np.array([i % 7])))
                info = index.info()
                self.assertLessEqual(info["log_bytes"], 1500, f"write {i}: the log outgrew the policy")
                snapshots.add(info["snapshot_seq"])
            self.assertGreaterEqual(len(snapshots - {0}), 2, "30 records of 13 floats pass 1500 bytes more than once")
            self.check(index, model, Q, "after automatic snapshots")

    def test_bad_writes_change_nothing(self):
        C, ids, tenant, Q = corpus(n=50)
        model = Model(C, ids, tenant)
        t1 = np.array([1])
        with tempfile.TemporaryDirectory() as tmp, \
                cpu_index(C, ids, tenant, storage__dir=tmp, storage__capacity_rows=52) as index:
            cases = [
                ((np.array([1, 1]), C[:2], np.array([0, 0])), ValueError, r"id 1 appears more than once"),
                ((np.array([1]), C[:1, :5], t1), ValueError, r"vectors must be \[n, dim\] = \[1, 13\].*\(1, 5\)"),
                ((np.array([1]), np.full((1, D), np.nan), t1), ValueError, r"row id 1 has a non-finite value"),
                ((np.array([1.5]), C[:1], t1), ValueError, r"ids must be integers, got dtype float64"),
                ((np.array([shardtopk.PAD_ID]), C[:1], t1), ValueError, r"is reserved"),
                ((np.arange(900, 903), C[:3], np.zeros(3, np.int64)), shardtopk.CapacityError, r"capacity exhausted: the upsert "
                 r"needs 3 new slot\(s\) but 2 of 52 are free"),
            ]
            for args, exc, msg in cases:
                with self.subTest(msg=msg), self.assertRaisesRegex(exc, msg):
                    index.upsert(*args[:2], attributes={"tenant": args[2]})
            with self.assertRaisesRegex(ValueError, r"attribute 'tenant' is missing"):
                index.upsert(np.array([1]), C[:1])
            with self.assertRaisesRegex(ValueError, r"unknown attribute 'year'"):
                index.upsert(np.array([1]), C[:1], attributes={"tenant": t1, "year": t1})
            for empty in (np.array([], dtype=np.int64), [], np.array([])):
                with self.subTest(ids=repr(empty)), self.assertRaisesRegex(ValueError, r"ids is empty"):
                    index.remove(empty)
            for big in ([1, 2, 2**63], [-2**63 - 1]):
                with self.subTest(ids=big), self.assertRaisesRegex(ValueError, r"ids: a value exceeds the int64 range"):
                    index.remove(big)
            with self.assertRaisesRegex(ValueError, r"id 4 appears more than once"):
                index.remove(np.array([4, 4]))
            with self.assertRaisesRegex(ValueError, r"filter"):
                index.remove_matching({"eq": {"nope": 1}})
            self.assertEqual(index.info()["applied_seq"], 0)
            self.check(index, model, Q, "after refused writes")

    def test_attribute_values_take_the_index_type(self):
        """Integers for a float64 attribute are taken when they are float64 values exactly (plain ints,
        a list, an int array), and refused otherwise, as the filter language refuses such a literal;
        reals for an int64 attribute are refused, naming the attribute."""
        C, ids, tenant, _ = corpus(n=20)
        price = np.arange(20) * 0.5
        with tempfile.TemporaryDirectory() as tmp, shardtopk.Index.from_arrays(
                C, ids=ids, backend="cpu", attributes={"tenant": tenant, "price": price}, k_max=1024,
                engine__threads=1, storage__dir=tmp) as index:
            self.assertEqual(index.info()["attributes"], {"tenant": "int64", "price": "float64"})
            for i, p in enumerate([[3], np.array([4], dtype=np.int32), np.array([2**63], dtype=np.uint64), [2**63]]):
                with self.subTest(price=repr(p)):
                    index.upsert([9000 + i], C[:1], attributes={"tenant": [100 + i], "price": p})
                    want = float(np.asarray(p).astype(np.float64)[0])
                    got, _ = index.search(C[:1], 1, filter={"all": [{"eq": {"price": want}}, {"eq": {"tenant": 100 + i}}]})
                    self.assertEqual(got.tolist(), [[9000 + i]])
            seq = index.info()["applied_seq"]
            for p in (np.array([2**53 + 1], dtype=np.uint64), np.array([-(2**53) - 1]), [2**53 + 1], [2**64 + 1]):
                with self.subTest(price=repr(p)), self.assertRaisesRegex(
                        ValueError, r"attributes\['price'\]\[0\] = -?\d+ is not exactly representable as a float64"):
                    index.upsert([9100], C[:1], attributes={"tenant": [1], "price": p})
            for t in ([6.0], np.array([6.5]), np.array([6], dtype=np.float32)):
                with self.subTest(tenant=repr(t)), self.assertRaisesRegex(
                        ValueError, r"attributes\['tenant'\] holds reals \(dtype float(64|32)\) but the attribute is "
                                    r"int64: pass integers"):
                    index.upsert([9100], C[:1], attributes={"tenant": t, "price": [1]})
            self.assertEqual(index.info()["applied_seq"], seq)

    def test_integer_lists_are_int64_as_integer_arrays_are(self):
        """A list of ints whose values do not fit int64 is refused like a uint64 array of them (numpy
        alone would make [1, 2, 2**63] a float64 column)."""
        C, ids, tenant, _ = corpus(n=3)
        for values in ([1, 2, 2**63], np.array([1, 2, 2**63], dtype=np.uint64)):
            with self.subTest(values=repr(values)), self.assertRaisesRegex(
                    ValueError, r"attributes\['x'\]: a value exceeds the int64 range"):
                shardtopk.Index.from_arrays(C, backend="cpu", attributes={"x": values})
        with self.assertRaisesRegex(ValueError, r"ids: a value exceeds the int64 range"):
            shardtopk.Index.from_arrays(C, ids=[1, 2, 2**63], backend="cpu")
        with shardtopk.Index.from_arrays(C, backend="cpu", attributes={"x": [1, 2, 2**62]}) as index:
            self.assertEqual(index.info()["attributes"], {"x": "int64"})

    def test_a_directory_is_tied_to_the_arrays_it_was_made_from(self):
        """A storage directory's log replays only over the rows it was written against: other rows,
        other ids or fewer rows are refused naming what differs; the same arrays reopen it."""
        rng = np.random.default_rng(5)
        P = rng.standard_normal((400, D)).astype(np.float32)
        P /= np.linalg.norm(P, axis=1, keepdims=True)
        with tempfile.TemporaryDirectory() as tmp:
            store = os.path.join(tmp, "store")

            def build(rows, ids=None):
                return shardtopk.Index.from_arrays(rows, ids=ids, backend="cpu", engine__threads=1, storage__dir=store)

            with build(P[:200]) as index:
                index.upsert([1000], P[300:301])
                index.remove([5])
            for what, rows, ids, msg in [
                    ("other rows", P[200:400], None, r"the same ids but other row values"),
                    ("other ids", P[:200], np.arange(200) + 1, r"other ids"),
                    ("fewer rows", P[:150], None, r"\[150 x 13\] rows, not the \[200 x 13\]"),
            ]:
                with self.subTest(what), self.assertRaisesRegex(
                        ValueError, r"its log holds 2 record\(s\) written against a base of 200 rows of dim 13.*" + msg):
                    build(rows, ids)
            with build(P[:200]) as index:
                got, _ = index.search(P[[5, 300]], 1)
                self.assertNotEqual(int(got[0, 0]), 5, "the delete was replayed")
                self.assertEqual(int(got[1, 0]), 1000, "the upsert was replayed")
                index.snapshot()
            with self.assertRaisesRegex(ValueError, r"holds a snapshot at seq 2 .*shardtopk\.Index\.open"):
                build(P[:200])

    def test_read_only_index(self):
        C, ids, tenant, _ = corpus(n=20)
        with cpu_index(C, ids, tenant) as index:
            self.assertFalse(index.info()["writable"])
            with self.assertRaisesRegex(PermissionError, r"read-only: storage.dir is not set"):
                index.upsert(np.array([1]), C[:1], attributes={"tenant": np.array([0])})
            with self.assertRaisesRegex(PermissionError, r"read-only"):
                index.remove(np.array([1]))
            with self.assertRaisesRegex(PermissionError, r"read-only"):
                index.snapshot()

def apply_model_only(model, op):
    if op[0] == "upsert":
        model.upsert(op[1], op[2], op[3])
    elif op[0] == "remove":
        model.remove(op[1])
    else:
        _, ids, t = model.arrays()
        model.remove(ids[t == op[1]["eq"]["tenant"]])


def child(out, store):
    """Two ranks: rank 0 runs the script's writes and a search; rank 1 follows."""
    C, ids, tenant, Q = corpus()
    index = shardtopk.Index.from_arrays(C, ids=ids, backend="cpu", metric="l2", engine__threads=1,
                                        attributes={"tenant": tenant}, storage__dir=store,
                                        storage__capacity_rows=400)
    if index.rank == 0:
        model = Model(C, ids, tenant)
        for op in script():
            apply(index, model, op)
        got_ids, got_s = index.search(Q, 10)
        live = index.info()["live_rows"]
        index.close()
        np.savez(out + ".npz", ids=got_ids, scores=got_s, live=live)
    else:
        index.follow()


def main():
    global ARGS, shardtopk
    ap = argparse.ArgumentParser()
    ap.add_argument("--module-dir", required=True, help="folder holding shardtopk*.so")
    ap.add_argument("--mpiexec", help="mpiexec for the two-rank run")
    ap.add_argument("--mpiexec-flags", default="", help="extra mpiexec flags, one string")
    ap.add_argument("--child", nargs=2, metavar=("OUT", "DIR"), help=argparse.SUPPRESS)
    ARGS, rest = ap.parse_known_args()
    ARGS.module_dir = os.path.abspath(ARGS.module_dir)
    sys.path.insert(0, ARGS.module_dir)
    import shardtopk as module

    shardtopk = module
    if ARGS.child:
        child(*ARGS.child)
        return
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
