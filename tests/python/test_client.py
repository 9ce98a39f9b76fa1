"""The pure-Python HTTP client (python/client, `shardtopk_client`) against a real `mpiexec -n 2
shardtopk serve` on CPU ranks: searches against the float64 oracle (small-integer rows: exact ids
and scores, ties included), 1-D and batched queries, filters with padded answers, the same bits
as the JSON route, upserts (binary and JSON forms) and deletes seen by later searches, refusals
as ServiceError with the service's status and message, one connection reused (and renewed
once the service closed it), and the same over TLS with API keys (401, 403, 429 with retry_after;
a certificate the client does not trust refused).

    python3 test_client.py --client-dir python/client --cli build/shardtopk --mpiexec mpiexec \
        [--mpiexec-flags "--allow-run-as-root --oversubscribe"]
"""

import argparse
import http.client
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import oracle  # noqa: E402
import serve_fixture  # noqa: E402
from serve_fixture import D  # noqa: E402

ARGS = None
sc = None  # the shardtopk_client module


class Model:
    """The live rows as the service should hold them: id -> (row, tenant, price)."""

    def __init__(self):
        C, ids, tenant, price = serve_fixture.corpus()
        self.rows = {int(i): (C[j], int(tenant[j]), float(price[j])) for j, i in enumerate(ids)}

    def arrays(self, tenant=None):
        keep = sorted(i for i, r in self.rows.items() if tenant is None or r[1] == tenant)
        C = np.array([self.rows[i][0] for i in keep], dtype=np.float32).reshape(len(keep), D)
        return C, np.array(keep, dtype=np.int64)


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # idle connections closed after 1 s: the reconnection test waits that out
        cls.svc = serve_fixture.Service(ARGS, cls.tmp.name, "client", "  idle_timeout_s: 1\n")
        cls.model = Model()
        cls.c = sc.Client(cls.svc.url)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.svc.close()
        cls.tmp.cleanup()

    def expect_exact(self, Q, k, ids, scores, tenant=None):
        C, live = self.model.arrays(tenant)
        want_ids, want_scores = oracle.topk(C, live, Q, min(k, len(live)), "inner_product")
        n = want_ids.shape[1]
        np.testing.assert_array_equal(ids[:, :n], want_ids)
        np.testing.assert_array_equal(scores[:, :n], want_scores.astype(np.float32))
        if n < k:  # padding after the real results
            self.assertTrue((ids[:, n:] == sc.PAD_ID).all())
            self.assertTrue(np.isneginf(scores[:, n:]).all())

    # ------------------------------------------------------------------ searches

    def test_a_info(self):
        info = self.c.info()
        self.assertEqual(info["dim"], D)
        self.assertEqual(info["metric"], "inner_product")
        self.assertEqual([a["name"] for a in info["attributes"]], ["tenant", "price"])

    def test_b_search_matches_the_oracle(self):
        rng = np.random.default_rng(1)
        Q = rng.integers(-3, 4, size=(7, D)).astype(np.float32)
        ids, scores = self.c.search(Q, 10)
        self.assertEqual((ids.dtype, scores.dtype, ids.shape, scores.shape), (np.int64, np.float32, (7, 10), (7, 10)))
        self.expect_exact(Q, 10, ids, scores)
        one_ids, one_scores = self.c.search(Q[3].tolist(), 10)  # a 1-D list: one query
        self.assertEqual(one_ids.shape, (1, 10))
        np.testing.assert_array_equal(one_ids[0], ids[3])
        np.testing.assert_array_equal(one_scores[0].view(np.uint32), scores[3].view(np.uint32))

    def test_c_filters_pad_short_answers(self):
        Q = np.ones((2, D), dtype=np.float32)
        ids, scores = self.c.search(Q, 12, filter={"eq": {"tenant": 3}})
        self.expect_exact(Q, 12, ids, scores, tenant=3)
        few = sorted(self.model.rows)[:4]
        ids, scores = self.c.search(Q, 12, filter=json.dumps({"ids_in": few}))
        np.testing.assert_array_equal(np.sort(ids[0, :4]), few)
        self.assertTrue((ids[:, 4:] == sc.PAD_ID).all() and np.isneginf(scores[:, 4:]).all())

    def test_d_same_bits_as_the_json_route(self):
        rng = np.random.default_rng(2)
        Q = rng.standard_normal((3, D)).astype(np.float32)
        ids, scores = self.c.search(Q, 5)
        req = urllib.request.Request(self.svc.url + "/v1/search", json.dumps({"queries": Q.tolist(), "k": 5}).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as r:
            doc = json.loads(r.read())
        np.testing.assert_array_equal(np.array(doc["ids"]), ids)
        np.testing.assert_array_equal(np.array(doc["scores"], dtype=np.float32).view(np.uint32), scores.view(np.uint32))

    # ------------------------------------------------------------------ ranges, pages, counts, ranks

    def ordered(self, q, tenant=None):
        """The oracle's (ids, float64 scores) of one query over the live rows, best first."""
        C, live = self.model.arrays(tenant)
        S = oracle.scores64(C, q.reshape(1, -1), "inner_product")[0]
        o = oracle.order(S, live, "inner_product")
        return live[o], S[o]

    def test_j_ranges_pages_counts_and_ranks(self):
        rng = np.random.default_rng(4)
        Q = rng.integers(-3, 4, size=(3, D)).astype(np.float32)
        # a range per query, its bound a score some rows tie at; with and without a filter
        for tenant in (None, 2):
            filt = None if tenant is None else {"eq": {"tenant": tenant}}
            want = [self.ordered(Q[i], tenant) for i in range(3)]
            bounds = [float(w[1][min(12 + 3 * i, len(w[1]) - 1)]) for i, w in enumerate(want)]
            ids, scores, st = self.c.search(Q, limit=8, filter=filt, min_score=bounds)
            for i, (w_ids, w_s) in enumerate(want):
                inside = w_s >= bounds[i]
                n = min(8, int(inside.sum()))
                self.assertEqual(st["total"][i], inside.sum())
                self.assertEqual(st["count"][i], n)
                np.testing.assert_array_equal(ids[i, :n], w_ids[inside][:n])
                np.testing.assert_array_equal(scores[i, :n], w_s[inside][:n].astype(np.float32))
                self.assertTrue((ids[i, n:] == sc.PAD_ID).all() and np.isneginf(scores[i, n:]).all())
                self.assertEqual(st["rows_scanned"][i], len(self.model.rows))
                self.assertEqual(st["rows_passing"][i], len(w_ids))
                self.assertEqual(st["next"][i], (float(scores[i, 7]), int(ids[i, 7])) if n == 8 else None)
            _, _, counts = self.c.search(Q, filter=filt, min_score=bounds, count_only=True)
            np.testing.assert_array_equal(counts["total"], st["total"])
            self.assertNotIn("next", counts)
        # pages walked to the end equal one top-k of every live row (k_max 50: pages of 9)
        q = Q[0]
        got, after = [], None
        while True:
            ids, scores, st = self.c.search(q, 9, search_after=after, stats=True)
            self.assertEqual(st["total"][0], -1)
            got.extend(ids[0, :st["count"][0]].tolist())
            after = st["next"][0]
            if after is None:
                break
        self.assertEqual(got, self.ordered(q)[0].tolist())
        # ranks: best, worst, a tie (in id order), a repeat
        w_ids, w_s = self.ordered(q)
        tie = np.flatnonzero(w_s == w_s[len(w_s) // 2])[:5]
        self.assertGreater(len(tie), 1)
        pick = [0, len(w_ids) - 1] + tie.tolist()[::-1] + [0]
        ranks, scores = self.c.rank(q, w_ids[pick])
        self.assertEqual((ranks.dtype, scores.dtype), (np.int64, np.float32))
        np.testing.assert_array_equal(ranks, np.array(pick) + 1)
        np.testing.assert_array_equal(scores, w_s[pick].astype(np.float32))
        f_ids, _ = self.ordered(q, 3)
        ranks, _ = self.c.rank(q.tolist(), [int(f_ids[-1])], filter=json.dumps({"eq": {"tenant": 3}}))
        self.assertEqual(ranks.tolist(), [len(f_ids)])
        # refusals: the service's 400 and its message
        cases = [
            (lambda: self.c.search(Q, 5, max_distance=1.0), "max_distance"),
            (lambda: self.c.search(Q, 5, min_score=[1.0, 2.0]), "min_score"),
            (lambda: self.c.search(Q, count_only=True, search_after=(1.0, 2)), "count_only"),
            (lambda: self.c.search(Q, 5, search_after=(1e39, 3)), "search_after"),
            (lambda: self.c.rank(q, [424242]), "unknown id 424242"),
            (lambda: self.c.rank(q, []), "ids"),
        ]
        for call, word in cases:
            with self.assertRaises(sc.ServiceError) as e:
                call()
            self.assertEqual(e.exception.status, 400, e.exception.message)
            self.assertIn(word, e.exception.message)
        with self.assertRaises(ValueError):
            self.c.search(Q, 5, limit=5)

    # ------------------------------------------------------------------ writes

    def test_e_upsert_and_delete_are_seen_by_searches(self):
        new_ids = np.array([9001, 9002, 9003], dtype=np.int64)
        rows = np.full((3, D), 3, dtype=np.float32)
        r = self.c.upsert(new_ids, rows, attributes={"tenant": [3, 3, 1], "price": [1.0, 2.0, 3.5]})  # binary
        self.assertEqual(r["upserted"], 3)
        self.assertGreaterEqual(r["seq"], 1)
        for i, row, t, p in zip(new_ids, rows, [3, 3, 1], [1.0, 2.0, 3.5]):
            self.model.rows[int(i)] = (row, t, p)
        Q = np.ones((1, D), dtype=np.float32)
        ids, scores = self.c.search(Q, 5)
        self.expect_exact(Q, 5, ids, scores)
        self.assertIn(9001, ids[0])
        old = sorted(i for i in self.model.rows if i < 9000)[0]
        r = self.c.delete([9001, old, 424242])
        self.assertEqual(r["deleted"], 2)
        del self.model.rows[9001], self.model.rows[old]
        gone = [i for i, v in self.model.rows.items() if v[1] == 1]
        r = self.c.delete(filter={"eq": {"tenant": 1}})
        self.assertEqual(r["deleted"], len(gone))
        for i in gone:
            del self.model.rows[i]
        # a million ids in one call (the binary route: 8 MB), one of them live
        live = sorted(self.model.rows)[0]
        many = np.concatenate([np.arange(10**6, dtype=np.int64) + 10**12, [live]])
        r = self.c.delete(many)
        self.assertEqual(r["deleted"], 1)
        del self.model.rows[live]
        ids, scores = self.c.search(Q, 20)
        self.expect_exact(Q, 20, ids, scores)
        # the JSON form (attributes that do not cover the schema): the service names what is missing
        with self.assertRaises(sc.ServiceError) as e:
            self.c.upsert([9100], np.zeros((1, D)), attributes={"tenant": [1]})
        self.assertEqual(e.exception.status, 400)
        self.assertIn("price", e.exception.message)

    # ------------------------------------------------------------------ refusals, connections

    def test_f_refusals_raise_service_error(self):
        cases = [
            (lambda: self.c.search(np.ones((2, D + 1)), 5), 400, "dim"),
            (lambda: self.c.search(np.ones((1, D)), 0), 400, "k"),
            (lambda: self.c.search(np.ones((1, D)), 5, filter={"eq": {"tenat": 1}}), 400, "tenat"),
            (lambda: self.c.search(np.ones((17, D)), 5), 413, "batch_max"),  # over the largest legal body
            (lambda: self.c.search(np.full((1, D), np.nan), 5), 400, "non-finite"),
            (lambda: self.c.upsert([1, 1], np.zeros((2, D)), {"tenant": [0, 0], "price": [0, 0]}), 400, "1"),
            (lambda: self.c.delete([]), 400, "empty"),
        ]
        for call, status, word in cases:
            with self.assertRaises(sc.ServiceError) as e:
                call()
            self.assertEqual(e.exception.status, status, e.exception.message)
            self.assertIn(word, e.exception.message)
        with self.assertRaises(ValueError):
            self.c.delete()
        # and the client still works after each refusal (the service closed those connections)
        ids, _ = self.c.search(np.ones((1, D)), 3)
        self.assertEqual(ids.shape, (1, 3))

    def test_g_one_connection_is_reused_and_renewed(self):
        self.c.search(np.ones((1, D)), 3)
        sock = self.c._conn.sock
        for _ in range(20):
            self.c.search(np.ones((1, D)), 3)
            self.c.info()
        self.assertIs(self.c._conn.sock, sock, "a new connection per call")
        time.sleep(1.8)  # past service.idle_timeout_s: the service closes the idle connection
        ids, _ = self.c.search(np.ones((1, D)), 3)
        self.assertEqual(ids.shape, (1, 3))
        self.assertIsNot(self.c._conn.sock, sock)

    def test_i_tls_and_keys(self):
        d = os.path.join(self.tmp.name, "pki")
        os.makedirs(d, exist_ok=True)
        try:
            ca, cert, key = make_pki(d)
        except (OSError, subprocess.CalledProcessError) as e:
            self.skipTest("certtool (Debian gnutls-bin) could not make the certificates: %s" % e)
        keys = {name: keygen(name, role, limits) for name, role, limits in
                (("reader", "read", ""), ("writer", "write", ""), ("slow", "read", "--rate 0.5 --burst 1"))}
        keys_file = os.path.join(d, "keys")
        with open(keys_file, "w") as f:
            f.write("".join(line for _, line in keys.values()))
        extra = ("  tls:\n    cert_file: %s\n    key_file: %s\n  auth:\n    keys_file: %s\n" % (cert, key, keys_file))
        with serve_fixture.Service(ARGS, self.tmp.name, "tls", extra, ca_file=ca) as svc:
            self.assertTrue(svc.url.startswith("https://"))
            with sc.Client(svc.url, api_key=keys["reader"][0], ca_file=ca) as c:
                Q = np.random.default_rng(3).integers(-3, 4, size=(3, D)).astype(np.float32)
                ids, scores = c.search(Q, 5)
                C, live = Model().arrays()  # the fresh corpus of this service
                want_ids, want_scores = oracle.topk(C, live, Q, 5, "inner_product")
                np.testing.assert_array_equal(ids, want_ids)
                np.testing.assert_array_equal(scores, want_scores.astype(np.float32))
                with self.assertRaises(sc.ServiceError) as e:
                    c.upsert([5], np.zeros((1, D)), {"tenant": [0], "price": [0.0]})
                self.assertEqual(e.exception.status, 403)
                self.assertIn("role read", e.exception.message)
            with sc.Client(svc.url, api_key=keys["writer"][0], ca_file=ca) as c:
                self.assertEqual(c.delete([123456789])["deleted"], 0)
            with sc.Client(svc.url, api_key="", ca_file=ca) as c:  # no key
                with self.assertRaises(sc.ServiceError) as e:
                    c.info()
                self.assertEqual(e.exception.status, 401)
            with sc.Client(svc.url, api_key=keys["slow"][0], ca_file=ca) as c:
                c.info()
                with self.assertRaises(sc.ServiceError) as e:
                    c.info()
                self.assertEqual(e.exception.status, 429)
                self.assertGreaterEqual(e.exception.retry_after, 1)
            with sc.Client(svc.url, api_key=keys["reader"][0]) as c:  # the system's CAs: not this one
                with self.assertRaises(ssl.SSLCertVerificationError):
                    c.info()
            with sc.Client(svc.url.replace("https", "http"), api_key=keys["reader"][0]) as c:
                with self.assertRaises((ConnectionError, http.client.HTTPException, OSError)):
                    c.info()  # plain HTTP to the TLS port: the connection is closed

    def test_h_read_only_service(self):
        with serve_fixture.Service(ARGS, self.tmp.name, "ro", storage=False) as ro, sc.Client(ro.url) as c:
            with self.assertRaises(sc.ServiceError) as e:
                c.upsert([1], np.zeros((1, D)), {"tenant": [0], "price": [0.0]})
            self.assertEqual(e.exception.status, 409)
            self.assertIn("read-only", e.exception.message)


def make_pki(d):
    """A CA and a server certificate for 127.0.0.1 made by certtool: (ca.pem, server.pem, server.key)."""
    def run(*a):
        subprocess.run(a, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    p = lambda name: os.path.join(d, name)  # noqa: E731
    for k in ("ca.key", "server.key"):
        run("certtool", "--generate-privkey", "--key-type", "ecdsa", "--no-text", "--outfile", p(k))
    with open(p("ca.tmpl"), "w") as f:
        f.write('cn = "client test CA"\nca\ncert_signing_key\nexpiration_days = 400\n')
    with open(p("server.tmpl"), "w") as f:
        f.write('cn = "localhost"\nip_address = "127.0.0.1"\ntls_www_server\nsigning_key\nexpiration_days = 365\n')
    run("certtool", "--generate-self-signed", "--no-text", "--load-privkey", p("ca.key"), "--template", p("ca.tmpl"),
        "--outfile", p("ca.pem"))
    run("certtool", "--generate-certificate", "--no-text", "--load-privkey", p("server.key"), "--load-ca-certificate",
        p("ca.pem"), "--load-ca-privkey", p("ca.key"), "--template", p("server.tmpl"), "--outfile", p("server.pem"))
    os.chmod(p("server.key"), 0o600)
    return p("ca.pem"), p("server.pem"), p("server.key")


def keygen(name, role, limits=""):
    """`shardtopk keygen`: (the key, its line for the keys file)."""
    out = subprocess.run([ARGS.cli, "keygen", "--name", name, "--role", role] + limits.split(), check=True,
                         capture_output=True, text=True).stdout.splitlines()
    return out[1], out[3] + "\n"


def main():
    global ARGS, sc
    ap = argparse.ArgumentParser()
    ap.add_argument("--client-dir", required=True, help="python/client (holds shardtopk_client/)")
    serve_fixture.add_arguments(ap)
    ARGS, rest = ap.parse_known_args()
    sys.path.insert(0, ARGS.client_dir)
    import shardtopk_client

    sc = shardtopk_client
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
