"""A client for `shardtopk serve` (exact sharded top-k vector search over HTTP), numpy only.

    from shardtopk_client import Client, ServiceError

    c = Client("http://127.0.0.1:8080")
    c = Client("https://search.internal:8443", api_key=key, ca_file="ca.pem")   # TLS and a key
    ids, scores = c.search(queries, k=10)               # int64 [B, k], float32 [B, k]
    ids, scores = c.search(queries, 10, filter={"eq": {"tenant": 7}})
    ids, scores, stats = c.search(queries, 10, min_score=0.5)   # a range: stats["total"], ["next"]
    ids, scores, stats = c.search(queries, 10, search_after=stats["next"])   # the next page
    ranks, scores = c.rank(query, [17, 42])              # exact 1-based ranks of ids
    c.upsert([1001, 1002], vectors, attributes={"tenant": [7, 7]})
    c.delete([1001])
    c.info()

Plain searches go over the binary route (float32 rows in, int64 ids and float32 scores out, the
service's bits exactly); ranges, pages and counts (min_score, max_distance, search_after,
count_only, stats) over the JSON route, with the same bits (scores written as the shortest text that
reads back as the float32). One keep-alive connection is reused for every call; a Client is not
safe to share between threads (make one per thread). A request the service refuses raises
ServiceError with its status and message; the wire format is docs/openapi.yaml's and
docs/SERVING.md's ("Binary protocol"). With TLS (an https:// URL) the service's certificate is
checked against `ca_file` (or the system's CAs); `api_key` is sent as `Authorization: Bearer KEY`
on every request (docs/OPERATIONS.md, "Security").
"""

import http.client
import json
import os
import ssl
import struct
import urllib.parse

import numpy as np

__all__ = ["Client", "ServiceError", "PAD_ID"]
__version__ = "0.2.0"

#: The id of a padding slot in a search answer (never a row's id): a query with fewer results
#: than k (a filter passing fewer rows) has its results first, then slots with this id and the
#: worst score (-inf; +inf for l2).
PAD_ID = np.iinfo(np.int64).max

_MAGIC = b"ST\xc0\x7f"


class ServiceError(Exception):
    """The service refused a request: `status` (the HTTP status) and `message` (its error text);
    `retry_after` (seconds, from a 429's or 503's Retry-After) or None."""

    def __init__(self, status, message, retry_after=None):
        super().__init__("HTTP %d: %s" % (status, message))
        self.status = status
        self.message = message
        self.retry_after = retry_after


class Client:
    """A connection to one service.

    Args:
        url: the service's base URL, ``http://host:port``, or ``https://host:port`` for a service
            with TLS (service.tls.*).
        timeout: seconds to wait for a connection or a reply.
        api_key: the key sent as ``Authorization: Bearer KEY`` (service.auth.keys_file); None: the
            environment's SHARDTOPK_API_KEY, if set.
        ca_file: https: a PEM file of the CA that signed the service's certificate; None: the
            system's CAs.
        ssl_context: https: an ssl.SSLContext to use instead (ca_file is then ignored).

    Raises:
        ValueError: another scheme than http or https.
    """

    def __init__(self, url="http://127.0.0.1:8080", timeout=60.0, api_key=None, ca_file=None, ssl_context=None):
        parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if parts.scheme not in ("http", "https"):
            raise ValueError("url %r: the service speaks http:// or https://" % url)
        self._tls = None
        if parts.scheme == "https":
            # the certificate and the host name are checked (ssl's defaults), TLS 1.2 or newer
            self._tls = ssl_context or ssl.create_default_context(cafile=ca_file)
        self._host = parts.hostname or "127.0.0.1"
        self._port = parts.port or (443 if self._tls else 80)
        self._prefix = parts.path.rstrip("/")
        self._timeout = timeout
        key = api_key if api_key is not None else os.environ.get("SHARDTOPK_API_KEY")
        self._auth = {"Authorization": "Bearer " + key} if key else {}
        self._conn = None
        self._info = None

    # ------------------------------------------------------------------ calls

    def info(self):
        """The index: rows, dim, metric, dtype, ranks, k_max, batch_max, attributes, limits and
        update counters (a dict, /v1/info)."""
        _, body = self._request("GET", "/v1/info")
        self._info = json.loads(body)
        return self._info

    def search(self, queries, k=None, filter=None, min_score=None, max_distance=None, limit=None,
               search_after=None, count_only=False, stats=False):
        """The k best rows of each query; with a bound or a cursor, a range or a page of the order.

        Args:
            queries: [B, D] or [D] array-like of numbers (sent as float32).
            k: results per query, 1 .. min(k_max, rows). Required, unless `limit` (the same
                number) or `count_only` is given.
            filter: a filter (docs/FILTERS.md) as a dict or JSON text, for every query; None: none.
            min_score: inner_product, cosine: only rows scoring >= this; a number for every
                query, or [B] numbers. The stats' "total" counts every such row passing the
                filter, past k too.
            max_distance: l2: only rows at squared distance <= this (a number, or [B]).
            limit: k under another name (give one of them).
            search_after: (score, id), or [B] such pairs: only rows strictly after that pair in
                the order (higher score first, equal scores: smaller id first): the next page.
                Pass the previous answer's stats["next"] (or an entry of it) as it is.
            count_only: with min_score / max_distance, the counts alone: ids and scores [B, 0].
            stats: True: the third value (below) for a plain top-k too (the first page of a walk).

        Returns:
            (ids, scores): int64 [B, k] and float32 [B, k], best first. A query with fewer than k
            results (fewer rows pass its filter, or lie within its bound) has them first, then
            padding: id PAD_ID, score -inf (+inf for l2).

            With min_score, max_distance, search_after, count_only or stats: (ids, scores, stats), stats
            a dict of per-query values (docs/SERVING.md "Ranges, pages and counts"):
            "total" int64 [B] (rows within the bound that pass the filter; -1: no bound),
            "rows_scanned" int64 [B] (live rows evaluated), "rows_passing" int64 [B] (live rows
            passing the filter), "count" int32 [B] (real results), "next" ([B] entries: the last
            result's (score, id) when the row is full, the next page's search_after; None when
            nothing follows; left out with count_only), "applied_seq" (the last write the
            answer reflects).

        Plain searches go over the binary route; those with a bound, a cursor, count_only or
        stats over the JSON route (the binary route takes none of these fields).

        Raises:
            ServiceError: refused by the service (wrong dimension, k out of range, a bad filter, a
                batch over batch_max, the other metric's bound, a bound that is not a finite
                float32, a list of the wrong length, the CUDA engine, ...), with its status and
                message.
            ValueError: queries of a wrong shape; both k and limit.
        """
        q = np.ascontiguousarray(queries, dtype="<f4")
        if q.ndim == 1:
            q = q.reshape(1, -1)
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] == 0:
            raise ValueError("queries must be [B, D] or [D] with B, D >= 1, got shape %s" % (np.shape(queries),))
        if k is not None and limit is not None:
            raise ValueError("give limit or k, not both (they are the same number)")
        if k is None:
            k = limit
        if k is None and not count_only:
            raise TypeError("search() needs k (or limit=): the results per query")
        if min_score is not None or max_distance is not None or search_after is not None or count_only or stats:
            return self._search_json(q, k, filter, min_score, max_distance, search_after, count_only)
        k = int(k)
        b, d = q.shape
        target = "/v1/search?k=%d&batch=%d" % (k, b)
        if filter is not None:
            text = filter if isinstance(filter, str) else json.dumps(filter, separators=(",", ":"))
            target += "&filter=" + urllib.parse.quote(text, safe="")
        # the optional header lets the service check the dtype and the dimension, not guess them
        header = _MAGIC + struct.pack("<IIII", 0x01020304, 1, b, d) + bytes(12)
        _, body = self._request("POST", target, header + q.tobytes(), "application/octet-stream")
        n = b * k
        if len(body) != 12 * n + 4 * b:  # ids, scores, counts (docs/SERVING.md "Binary protocol")
            raise ServiceError(200, "binary answer of %d bytes, expected %d" % (len(body), 12 * n + 4 * b))
        ids = np.frombuffer(body, "<i8", n).reshape(b, k).astype(np.int64)
        scores = np.frombuffer(body, "<f4", n, offset=8 * n).reshape(b, k).astype(np.float32)
        return ids, scores

    def rank(self, query, ids, filter=None):
        """The exact 1-based rank of each of `ids` for `query` among the live rows passing
        `filter` (POST /v1/rank): 1 + the rows ahead of it in the order (a higher score, or an
        equal score and a smaller id; l2: a smaller distance). An id the filter does not pass
        gets the rank it would have.

        Args:
            query: [D] numbers (sent as float32 values).
            ids: [n] int64 ids of live rows, 1 <= n <= min(batch_max, k_max); repeats allowed.
            filter: a filter as for search(), or None.

        Returns:
            (ranks, scores): int64 [n] and float32 [n] (similarity; l2: squared distance), in
            the order of `ids`.

        Raises:
            ServiceError: an id no live row has (named), n out of range, a bad query or filter,
                the CUDA engine (400).
        """
        q = np.ascontiguousarray(query, dtype="<f4").reshape(-1)
        doc = {"query": q.tolist(), "ids": [int(i) for i in np.asarray(ids).reshape(-1).tolist()]}
        if filter is not None:
            doc["filter"] = json.loads(filter) if isinstance(filter, str) else filter
        _, body = self._request("POST", "/v1/rank", json.dumps(doc).encode(), "application/json")
        r = json.loads(body)
        return np.array(r["ranks"], dtype=np.int64), np.array(r["scores"], dtype=np.float32)

    def upsert(self, ids, vectors, attributes=None):
        """Inserts rows, or replaces the rows of ids that are live; returns once they are durable
        and visible to every later search.

        Args:
            ids: [N] int64 ids (distinct).
            vectors: [N, D] numbers (float32).
            attributes: {name: [N] values} for every attribute of the index (info()["attributes"]).

        Returns:
            {"upserted": N, "seq": s}, s the write-ahead log's sequence number of the request.

        Raises:
            ServiceError: refused (409 read-only service, 507 no free slots, 400 bad input, ...).
        """
        ids = np.ascontiguousarray(ids, dtype="<i8").reshape(-1)
        vectors = np.ascontiguousarray(vectors, dtype="<f4")
        attributes = dict(attributes or {})
        schema = self._schema()
        if (vectors.ndim == 2 and vectors.shape == (len(ids), self._info["dim"]) and len(ids) > 0
                and set(attributes) == {a["name"] for a in schema}
                and all(np.shape(attributes[a["name"]]) == (len(ids),) for a in schema)):
            # binary: ids, rows, then each attribute column in the index's order
            parts = [ids.tobytes(), vectors.tobytes()]
            for a in schema:
                parts.append(np.ascontiguousarray(attributes[a["name"]],
                                                  dtype="<i8" if a["type"] == "int64" else "<f8").tobytes())
            _, body = self._request("POST", "/v1/upsert?n=%d" % len(ids), b"".join(parts),
                                    "application/octet-stream")
        else:
            # anything else goes as JSON, for the service to name what does not fit
            doc = {"ids": ids.tolist(), "vectors": vectors.tolist(),
                   "attributes": {n: np.asarray(v).tolist() for n, v in attributes.items()}}
            if not attributes:
                del doc["attributes"]
            _, body = self._request("POST", "/v1/upsert", json.dumps(doc).encode(), "application/json")
        return json.loads(body)

    def delete(self, ids=None, filter=None):
        """Deletes the rows of `ids` (ids that are not live are ignored), or the live rows that pass
        `filter` (a dict or JSON text); give one of them. Ids go over the binary route (8 bytes
        each: a million ids in one call).

        Returns:
            {"deleted": n, "seq": s}: the rows that were live, and the log's sequence number.
        """
        if (ids is None) == (filter is None):
            raise ValueError("delete takes either ids or filter")
        if ids is not None:
            ids = np.ascontiguousarray(ids, dtype="<i8").reshape(-1)
            if len(ids) > 0:
                # binary: the ids as little-endian int64 (8 bytes each, no text to parse)
                _, body = self._request("POST", "/v1/delete?n=%d" % len(ids), ids.tobytes(),
                                        "application/octet-stream")
                return json.loads(body)
            doc = {"ids": []}  # for the service to name what is wrong
        else:
            doc = {"filter": json.loads(filter) if isinstance(filter, str) else filter}
        _, body = self._request("POST", "/v1/delete", json.dumps(doc).encode(), "application/json")
        return json.loads(body)

    def snapshot(self):
        """Writes a new base snapshot of the live rows; returns {"path", "seq", "rows"}."""
        _, body = self._request("POST", "/v1/snapshot", b"", "application/json")
        return json.loads(body)

    def close(self):
        """Closes the connection (the next call opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ transport

    def _search_json(self, q, k, filter, min_score, max_distance, search_after, count_only):
        """search() with order fields: the JSON route, its ragged lists padded to [B, k]."""
        doc = {"queries": q.tolist()}
        if k is not None:
            doc["limit"] = int(k)  # k by its other name: the reply then carries the stats, also without a bound
        if filter is not None:
            doc["filter"] = json.loads(filter) if isinstance(filter, str) else filter
        for name, v in (("min_score", min_score), ("max_distance", max_distance), ("search_after", search_after)):
            if v is not None:
                doc[name] = _plain(v)
        if count_only:
            doc["count_only"] = True
        _, body = self._request("POST", "/v1/search", json.dumps(doc).encode(), "application/json")
        r = json.loads(body)
        b = len(r["ids"])
        width = 0 if count_only else int(k)
        worst = np.inf if r["metric"] == "l2" else -np.inf
        ids = np.full((b, width), PAD_ID, dtype=np.int64)
        scores = np.full((b, width), worst, dtype=np.float32)
        for i, (row_ids, row_scores) in enumerate(zip(r["ids"], r["scores"])):
            ids[i, :len(row_ids)] = row_ids
            scores[i, :len(row_scores)] = row_scores
        scanned = np.array(r["rows_scanned"], dtype=np.int64)
        stats = {
            "total": np.array([-1 if t is None else t for t in r["total"]], dtype=np.int64),
            "rows_scanned": scanned,
            # without a filter every live row passes (the service then leaves the field out)
            "rows_passing": np.array(r["rows_passing"], dtype=np.int64) if "rows_passing" in r else scanned.copy(),
            "count": np.array([len(x) for x in r["ids"]], dtype=np.int32),
            "applied_seq": r["applied_seq"],
        }
        if "next" in r:
            # the float32 value the reply's shortest text stands for, as the Python module gives it
            stats["next"] = [None if n is None else (float(np.float32(n[0])), int(n[1])) for n in r["next"]]
        return ids, scores, stats

    def _schema(self):
        if self._info is None:
            self.info()
        return self._info["attributes"]

    def _request(self, method, target, body=None, content_type=None):
        headers = dict(self._auth)
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in (0, 1):
            reused = self._conn is not None
            if self._conn is None:
                if self._tls:
                    self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=self._timeout,
                                                             context=self._tls)
                else:
                    self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, self._prefix + target, body=body, headers=headers)
                r = self._conn.getresponse()
                data = r.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                # An idle keep-alive connection the service has closed (service.idle_timeout_s):
                # the request never reached it; send it once more on a new connection.
                self.close()
                if reused and attempt == 0:
                    continue
                raise ConnectionError("%s %s: %s" % (method, target, e)) from e
            except Exception:
                self.close()
                raise
            if r.will_close:
                self.close()
            if r.status != 200:
                retry = r.getheader("Retry-After")
                raise ServiceError(r.status, _message(data), int(retry) if retry and retry.isdigit() else None)
            return r, data
        raise AssertionError("unreachable")


def _plain(v):
    """An order field's value as JSON takes it: numpy scalars and arrays, tuples -> lists."""
    if isinstance(v, np.ndarray):
        return _plain(v.tolist())
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _message(data):
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and "error" in doc:
            return str(doc["error"])
    except ValueError:
        pass
    return data[:500].decode("utf-8", "replace")
