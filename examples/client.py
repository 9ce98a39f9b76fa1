#!/usr/bin/env python3
"""A client for `shardtopk serve` (standard library + numpy), usable as an agent's retrieval tool.

    from client import ShardTopK
    st = ShardTopK("http://127.0.0.1:8080")
    st.info()                                   # rows, dim, metric, dtype, ranks, k_max, ...
    ids, scores = st.search(queries, k=10)      # queries: [B, D] (or [D]) float32 array
    ids, scores = st.search(queries, k=10, binary=False)   # the JSON route instead

The binary route (default) sends a 32-byte header and B x D little-endian float32 rows and
receives B x K int64 ids followed by B x K float32 scores (docs/SERVING.md, "Binary protocol").
Scores are similarities for inner_product and cosine, squared distances for l2. Errors raise
ShardTopKError with the service's message (HTTP 4xx: the request was wrong and changed nothing;
5xx: a rank failed).

Command line (a smoke test; reads queries from a raw float32 file or makes random ones):
    python3 examples/client.py --url http://127.0.0.1:8080 -k 5 [--queries q.f32] [--json]
"""
import argparse
import json
import struct
import sys
import urllib.error
import urllib.request

import numpy as np


class ShardTopKError(RuntimeError):
    def __init__(self, status, message):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class ShardTopK:
    def __init__(self, url="http://127.0.0.1:8080", timeout=60.0):
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._info = None

    def _request(self, path, body=None, content_type=None):
        req = urllib.request.Request(self.url + path, data=body, method="POST" if body is not None else "GET")
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                msg = json.loads(raw)["error"]
            except (ValueError, KeyError):
                msg = raw.decode(errors="replace")
            raise ShardTopKError(e.code, msg) from None

    def info(self):
        """GET /v1/info: rows, dim, metric, dtype, ranks, engine, k_max, batch_max, version."""
        if self._info is None:
            self._info = json.loads(self._request("/v1/info"))
        return self._info

    def ready(self):
        try:
            self._request("/readyz")
            return True
        except (ShardTopKError, urllib.error.URLError):
            return False

    def search(self, queries, k=10, binary=True):
        """Top-k of each query. Returns (ids [B, k] int64, scores [B, k] float32), best first."""
        q = np.asarray(queries, dtype=np.float32)
        if q.ndim == 1:
            q = q[None, :]
        if q.ndim != 2:
            raise ValueError(f"queries must be [B, D] or [D], got shape {q.shape}")
        b = q.shape[0]
        if binary:
            # The optional header (docs/SERVING.md): the service checks dtype, rows and dim.
            header = struct.pack("<4sIIII12x", b"ST\xc0\x7f", 0x01020304, 1, b, q.shape[1])
            body = header + np.ascontiguousarray(q, dtype="<f4").tobytes()
            raw = self._request(f"/v1/search?k={int(k)}&batch={b}", body, "application/octet-stream")
            if len(raw) != b * k * 12 + b * 4:
                raise ShardTopKError(200, f"reply of {len(raw)} bytes, expected {b * k * 12 + b * 4}")
            ids = np.frombuffer(raw, dtype="<i8", count=b * k).reshape(b, k)
            scores = np.frombuffer(raw, dtype="<f4", count=b * k, offset=b * k * 8).reshape(b, k)
            # counts [B] int32: a query's slots past its count are padding (fewer live rows than k)
            return ids, scores
        body = json.dumps({"queries": q.tolist(), "k": int(k)}).encode()
        reply = json.loads(self._request("/v1/search", body, "application/json"))
        return (np.asarray(reply["ids"], dtype=np.int64).reshape(b, k),
                np.asarray(reply["scores"], dtype=np.float64).astype(np.float32).reshape(b, k))

    def as_tool(self, k=10):
        """A plain function an agent framework can register as a retrieval tool:
        f(embedding: list[float]) -> list[{"id": int, "score": float}]."""
        def retrieve(embedding):
            ids, scores = self.search(np.asarray(embedding, dtype=np.float32), k=k)
            return [{"id": int(i), "score": float(s)} for i, s in zip(ids[0], scores[0])]
        return retrieve


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("-k", type=int, default=5)
    p.add_argument("--queries", help="raw little-endian float32 file [B, D]")
    p.add_argument("--batch", type=int, default=3, help="queries to send (first B of the file, or random)")
    p.add_argument("--json", action="store_true", help="use the JSON route instead of the binary one")
    a = p.parse_args()
    st = ShardTopK(a.url)
    info = st.info()
    print("service:", json.dumps(info))
    d = int(info["dim"])
    if a.queries:
        q = np.fromfile(a.queries, dtype="<f4").reshape(-1, d)[: a.batch]
    else:
        q = np.random.default_rng(0).standard_normal((a.batch, d)).astype(np.float32)
    ids, scores = st.search(q, k=a.k, binary=not a.json)
    for i in range(len(q)):
        print(f"query {i}: ids {ids[i].tolist()} scores {[float(f'{x:.7g}') for x in scores[i]]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
