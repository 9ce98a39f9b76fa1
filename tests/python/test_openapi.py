"""docs/openapi.yaml against a real `mpiexec -n 2 shardtopk serve` on CPU ranks: every route's
answers (JSON and binary, successes and refusals) are checked against the document (status
documented for the path and method, Content-Type listed, required headers there, JSON bodies
valid by its schemas, binary bodies of the length its prose gives), every documented operation
is seen answering 2xx, an undocumented path or method is a 404 / 405 with the Error body, and a
service with API keys answers 401, 403 and 429 as documented.

    python3 test_openapi.py --spec docs/openapi.yaml --cli build/shardtopk --mpiexec mpiexec \
        [--mpiexec-flags "--allow-run-as-root --oversubscribe"]

Exit 77 (skipped, said on stderr) when PyYAML is missing (Debian: python3-yaml).
"""

import argparse
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import unittest
import urllib.parse

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import openapi_check  # noqa: E402
import serve_fixture  # noqa: E402
from serve_fixture import D  # noqa: E402

ARGS = None
SPEC = None


class Api(unittest.TestCase):
    """One writable service (storage.dir, capacity for 100 more rows) and one read-only one with a
    small in-flight budget, shared by the tests; every reply is checked against the document."""

    seen = {}  # (path, method) -> set of statuses

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.rw = serve_fixture.Service(ARGS, cls.tmp.name, "rw")
        cls.ro = serve_fixture.Service(ARGS, cls.tmp.name, "ro", "  max_inflight_bytes: 65536\n", storage=False)

    @classmethod
    def tearDownClass(cls):
        cls.rw.close()
        cls.ro.close()
        cls.tmp.cleanup()

    def request(self, method, target, body=None, headers=None, service=None, expect=None):
        """Sends one request on a fresh connection; checks the reply against the document."""
        service = service or self.rw
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=30)
        conn.request(method, target, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        conn.close()
        self.check(method, target, r.status, dict(r.getheaders()), data, expect)
        return r.status, dict(r.getheaders()), data

    def check(self, method, target, status, headers, data, expect):
        path = urllib.parse.urlsplit(target).path
        errors = openapi_check.check_reply(SPEC, path, method, status, headers, data.decode("utf-8", "replace"))
        self.assertEqual(errors, [], "%s %s" % (method, target))
        if expect is not None:
            self.assertEqual(status, expect, "%s %s: %s" % (method, target, data[:300]))
        Api.seen.setdefault((path, "GET" if method == "HEAD" else method), set()).add(status)

    # ---------------------------------------------------------------- each route

    def test_get_routes(self):
        for path, body_check in [("/healthz", None), ("/readyz", None), ("/v1/info", None), ("/metrics", None)]:
            self.request("GET", path, expect=200)
            status, headers, data = self.request("HEAD", path, expect=200)
            self.assertEqual(data, b"", "HEAD has no body")
        _, _, data = self.request("GET", "/v1/info", expect=200)
        info = json.loads(data)
        self.assertEqual(info["dim"], D)
        self.assertEqual([a["name"] for a in info["attributes"]], ["tenant", "price"])
        _, _, data = self.request("GET", "/v1/info", service=self.ro, expect=200)
        self.assertFalse(json.loads(data)["writable"])

    def test_search_json_and_binary(self):
        C, ids, _, _ = serve_fixture.corpus()
        q = C[:3] + 1
        body = json.dumps({"queries": q.tolist(), "k": 5, "filter": {"eq": {"tenant": 2}}})
        _, headers, data = self.request("POST", "/v1/search", body, {"Content-Type": "application/json"}, expect=200)
        self.assertEqual(len(json.loads(data)["ids"]), 3)
        self.request("POST", "/v1/search?k=4", json.dumps({"query": q[0].tolist()}),
                     {"Content-Type": "application/json; charset=utf-8"}, expect=200)
        rows = q.astype("<f4").tobytes()
        _, headers, data = self.request("POST", "/v1/search?k=4&batch=3", rows,
                                        {"Content-Type": "application/octet-stream"}, expect=200)
        self.assertEqual(len(data), 12 * 3 * 4 + 4 * 3, "ids and scores of B x K (12 bytes each), counts [B] int32")
        header = b"ST\xc0\x7f" + struct.pack("<IIII", 0x01020304, 1, 3, D) + bytes(12)
        f = urllib.parse.quote(json.dumps({"range": {"price": [0, 10]}}))
        _, _, data = self.request("POST", "/v1/search?k=6&filter=" + f, header + rows,
                                  {"Content-Type": "application/octet-stream"}, expect=200)
        self.assertEqual(len(data), 12 * 3 * 6 + 4 * 3, "ids, scores, then the counts [B] int32")
        counts = np.frombuffer(data, "<i4", 3, offset=12 * 3 * 6)
        self.assertTrue(((counts >= 0) & (counts <= 6)).all())

    def test_rank(self):
        C, ids, _, _ = serve_fixture.corpus()
        q = (C[0] + 1).tolist()
        j = {"Content-Type": "application/json"}
        _, _, data = self.request("POST", "/v1/search", json.dumps({"query": q, "k": 3}), j, expect=200)
        top = json.loads(data)["ids"][0]
        _, _, data = self.request("POST", "/v1/rank", json.dumps({"query": q, "ids": top}), j, expect=200)
        self.assertEqual(json.loads(data)["ranks"], [1, 2, 3])
        self.request("POST", "/v1/rank", json.dumps({"query": q, "ids": top, "filter": {"eq": {"tenant": 2}}}), j,
                     expect=200)
        self.request("POST", "/v1/rank", json.dumps({"query": q, "ids": [10 ** 15]}), j, expect=400)
        self.request("POST", "/v1/rank", json.dumps({"query": q}), j, expect=400)

    def test_writes(self):
        C, ids, _, _ = serve_fixture.corpus()
        new = np.arange(10**6, 10**6 + 4, dtype=np.int64)
        body = json.dumps({"ids": new.tolist(), "vectors": C[:4].tolist(),
                           "attributes": {"tenant": [1, 2, 3, 4], "price": [0.5, 1, 2, 3]}})
        _, _, data = self.request("POST", "/v1/upsert", body, {"Content-Type": "application/json"}, expect=200)
        self.assertEqual(json.loads(data)["upserted"], 4)
        n = 2
        binary = (np.array([2 * 10**6, 2 * 10**6 + 1], "<i8").tobytes() + C[:n].astype("<f4").tobytes()
                  + np.array([1, 1], "<i8").tobytes() + np.array([0.0, 1.5], "<f8").tobytes())
        self.request("POST", "/v1/upsert?n=2", binary, {"Content-Type": "application/octet-stream"}, expect=200)
        _, _, data = self.request("POST", "/v1/delete", json.dumps({"ids": [int(new[0]), 12345]}),
                                  {"Content-Type": "application/json"}, expect=200)
        self.assertEqual(json.loads(data)["deleted"], 1)
        _, _, data = self.request("POST", "/v1/delete?n=2", np.array([2 * 10**6, 54321], "<i8").tobytes(),
                                  {"Content-Type": "application/octet-stream"}, expect=200)
        self.assertEqual(json.loads(data)["deleted"], 1)
        self.request("POST", "/v1/delete?n=2", b"\0" * 8, {"Content-Type": "application/octet-stream"}, expect=400)
        self.request("POST", "/v1/delete", json.dumps({"filter": {"eq": {"tenant": 4}}}),
                     {"Content-Type": "application/json"}, expect=200)
        self.request("POST", "/v1/snapshot", None, expect=200)
        self.request("POST", "/v1/snapshot", "{}", {"Content-Type": "application/json"}, expect=200)
        self.request("POST", "/v1/snapshot", b"", {"Content-Type": "application/octet-stream"}, expect=200)
        # more new rows than the free slots (100 at start over both ranks, and the deleted ones): 507
        many = np.arange(3 * 10**6, 3 * 10**6 + 300, dtype=np.int64)
        body = json.dumps({"ids": many.tolist(), "vectors": np.ones((300, D)).tolist(),
                           "attributes": {"tenant": [0] * 300, "price": [0.0] * 300}})
        self.request("POST", "/v1/upsert", body, {"Content-Type": "application/json"}, expect=507)
        # a read-only service
        for path in ("/v1/upsert", "/v1/delete", "/v1/snapshot"):
            self.request("POST", path, "{}", {"Content-Type": "application/json"}, service=self.ro, expect=409)

    # ---------------------------------------------------------------- refusals

    def test_refusals(self):
        j = {"Content-Type": "application/json"}
        self.request("POST", "/v1/search", '{"queries": [[1, 2', j, expect=400)
        self.request("POST", "/v1/search", json.dumps({"query": [1] * D, "k": 0}), j, expect=400)
        self.request("POST", "/v1/search?k=5&k=6", b"\0" * (4 * D), {"Content-Type": "application/octet-stream"},
                     expect=400)
        self.request("POST", "/v1/upsert", json.dumps({"ids": [1], "vectors": [[1] * (D + 1)]}), j, expect=400)
        self.request("POST", "/v1/delete", json.dumps({"ids": []}), j, expect=400)
        self.request("POST", "/v1/snapshot", "[1]", j, expect=400)
        self.request("GET", "/v1/nothing", expect=404)
        self.request("POST", "/", "{}", j, expect=404)
        for path, method in [("/v1/search", "GET"), ("/v1/upsert", "PUT"), ("/healthz", "POST"),
                             ("/v1/info", "DELETE"), ("/metrics", "PATCH"), ("/readyz", "POST"),
                             ("/v1/delete", "GET"), ("/v1/snapshot", "GET")]:
            status, headers, _ = self.request(method, path, "{}" if method != "GET" else None, j, expect=405)
            self.assertIn("Allow", headers)
        self.request("POST", "/v1/search", "k=5", {"Content-Type": "text/plain"}, expect=415)
        self.request("GET", "/healthz", None, {"X-%d" % i: "x" for i in range(120)}, expect=431)
        # 411 and 413: no length; a length over the limit (refused before the body)
        for path in ("/v1/search", "/v1/upsert"):
            conn = http.client.HTTPConnection("127.0.0.1", self.rw.port, timeout=30)
            conn.putrequest("POST", path)
            conn.putheader("Content-Type", "application/json")
            conn.endheaders()
            r = conn.getresponse()
            self.check("POST", path, r.status, dict(r.getheaders()), r.read(), 411)
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", self.rw.port, timeout=30)
            conn.putrequest("POST", path)
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(1 << 36))
            conn.endheaders()
            r = conn.getresponse()
            self.check("POST", path, r.status, dict(r.getheaders()), r.read(), 413)
            conn.close()
        # 503: the read-only service's in-flight budget (64 KiB) held by a body still arriving
        hold = socket.create_connection(("127.0.0.1", self.ro.port))
        hold.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 60000\r\n\r\n{")
        try:
            status, headers, _ = self.request("POST", "/v1/search", "{" + " " * 59998 + "}", j, service=self.ro,
                                              expect=503)
            self.assertEqual(headers.get("Retry-After"), "1")
        finally:
            hold.close()

    def test_key_refusals(self):
        """A service with keys (one read key limited to 1 request at a time): 401, 403, 429."""
        keys = {}
        for name, role, limits in (("reader", "read", []), ("slow", "read", ["--rate", "0.2", "--burst", "1"])):
            out = subprocess.run([ARGS.cli, "keygen", "--name", name, "--role", role] + limits, check=True,
                                 capture_output=True, text=True).stdout.splitlines()
            keys[name] = (out[1], out[3])
        keys_file = os.path.join(self.tmp.name, "keys")
        with open(keys_file, "w") as f:
            f.write("".join(line + "\n" for _, line in keys.values()))
        with serve_fixture.Service(ARGS, self.tmp.name, "keyed", "  auth:\n    keys_file: %s\n" % keys_file) as svc:
            j = {"Content-Type": "application/json"}
            bearer = lambda name: dict(j, Authorization="Bearer " + keys[name][0])  # noqa: E731
            query = json.dumps({"query": [1] * D, "k": 3})
            self.request("GET", "/healthz", service=svc, expect=200)
            self.request("GET", "/readyz", service=svc, expect=200)
            for method, path, body in [("POST", "/v1/search", query), ("GET", "/v1/info", None),
                                       ("GET", "/metrics", None), ("POST", "/v1/upsert", "{}"),
                                       ("POST", "/v1/delete", "{}"), ("POST", "/v1/snapshot", "{}")]:
                _, headers, _ = self.request(method, path, body, j, service=svc, expect=401)
                self.assertEqual(headers.get("WWW-Authenticate"), 'Bearer realm="shardtopk"')
            _, headers, _ = self.request("GET", "/v1/info", None, dict(j, Authorization="Bearer nope"), service=svc,
                                         expect=401)
            self.assertIn('error="invalid_token"', headers.get("WWW-Authenticate"))
            self.request("POST", "/v1/search", query, bearer("reader"), service=svc, expect=200)
            for path in ("/v1/upsert", "/v1/delete", "/v1/snapshot"):
                self.request("POST", path, "{}", bearer("reader"), service=svc, expect=403)
            self.request("GET", "/v1/info", None, bearer("slow"), service=svc, expect=200)
            for method, path, body in [("GET", "/v1/info", None), ("POST", "/v1/search", query)]:
                _, headers, _ = self.request(method, path, body, bearer("slow"), service=svc, expect=429)
                self.assertGreaterEqual(int(headers["Retry-After"]), 1)

    # ---------------------------------------------------------------- last: coverage

    def test_zz_every_documented_operation_answered(self):
        missing = []
        for path, item in SPEC["paths"].items():
            for method in item:
                statuses = Api.seen.get((path, method.upper()), set())
                if not any(200 <= s < 300 for s in statuses):
                    missing.append("%s %s" % (method.upper(), path))
        self.assertEqual(missing, [], "documented operations never seen answering 2xx")
        for (path, method), statuses in sorted(Api.seen.items()):
            print("  %-6s %-14s %s" % (method, path, " ".join(str(s) for s in sorted(statuses))))


def main():
    global ARGS, SPEC
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True, help="docs/openapi.yaml")
    serve_fixture.add_arguments(ap)
    ARGS, rest = ap.parse_known_args()
    try:
        import yaml
    except ImportError:
        print("skipped: PyYAML is missing (Debian: apt-get install python3-yaml)", file=sys.stderr)
        sys.exit(77)
    with open(ARGS.spec) as f:
        SPEC = yaml.safe_load(f)
    assert SPEC["openapi"].startswith("3.1"), SPEC["openapi"]
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
