"""A client for `shardtopk serve` (exact sharded top-k vector search over HTTP), numpy only.

    from shardtopk_client import Client, ServiceError

    c = Client("http://127.0.0.1:8080")
    c = Client("https://search.internal:8443", api_key=key, ca_file="ca.pem")   # TLS and a key
    ids, scores = c.search(queries, k=10)               # int64 [B, k], float32 [B, k]
    ids, scores = c.search(queries, 10, filter={"eq": {"tenant": 7}})
    c.upsert([1001, 1002], vectors, attributes={"tenant": [7, 7]})
    c.delete([1001])
    c.info()

Searches go over the binary route (float32 rows in, int64 ids and float32 scores out, the
service's bits exactly). One keep-alive connection is reused for every call; a Client is not
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

    def search(self, queries, k, filter=None):
        """The k best rows of each query.

        Args:
            queries: [B, D] or [D] array-like of numbers (sent as float32).
            k: results per query, 1 .. min(k_max, rows).
            filter: a filter (docs/FILTERS.md) as a dict or JSON text, for every query; None: none.

        Returns:
            (ids, scores): int64 [B, k] and float32 [B, k], best first. A query with fewer than k
            results (fewer rows pass its filter) has them first, then padding: id PAD_ID, score
            -inf (+inf for l2).

        Raises:
            ServiceError: refused by the service (wrong dimension, k out of range, a bad filter, a
                batch over batch_max, ...), with its status and message.
        """
        q = np.ascontiguousarray(queries, dtype="<f4")
        if q.ndim == 1:
            q = q.reshape(1, -1)
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] == 0:
            raise ValueError("queries must be [B, D] or [D] with B, D >= 1, got shape %s" % (np.shape(queries),))
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


def _message(data):
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and "error" in doc:
            return str(doc["error"])
    except ValueError:
        pass
    return data[:500].decode("utf-8", "replace")
