"""A real `mpiexec -n 2 shardtopk serve` on CPU ranks for the Python tests of the HTTP API.

    with Service(args, tmpdir, extra_config) as svc:   # starts it, waits for /readyz
        svc.port, svc.url, svc.log()

The corpus (corpus()) is small integers (exact float32 scores, ties on purpose) with two
attributes, `tenant` (int64) and `price` (float64), and ids that are not row positions.
"""

import os
import shlex
import signal
import ssl
import subprocess
import time
import urllib.request

import numpy as np

D = 8
N = 200


def corpus(seed=5):
    """C [N, D] float32, ids [N] int64, tenant [N] int64, price [N] float64."""
    rng = np.random.default_rng(seed)
    C = rng.integers(-3, 4, size=(N, D)).astype(np.float32)
    ids = (rng.permutation(N).astype(np.int64) * 3 + 7)
    tenant = (np.arange(N) % 5).astype(np.int64)
    price = (np.arange(N) * 0.25).astype(np.float64)
    return C, ids, tenant, price


def write_corpus(path):
    import h5py

    C, ids, tenant, price = corpus()
    with h5py.File(path, "w") as f:
        f["train"] = C
        f["ids"] = ids
        f["tenant"] = tenant
        f["price"] = price
        f.attrs["distance"] = "dot"
    return C, ids, tenant, price


class Service:
    """`mpiexec -n 2 shardtopk serve` in the background; stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, args, workdir, name, service_extra="", storage=True, ranks=2, ca_file=None):
        # ca_file: the service speaks TLS (service_extra sets service.tls.*), its certificate
        # signed by this CA: readiness is asked over https, and url is https://.
        self.ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self.dir = os.path.join(workdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.corpus_path = os.path.join(self.dir, "corpus.h5")
        write_corpus(self.corpus_path)
        config = os.path.join(self.dir, "serve.yaml")
        text = (
            "corpus:\n  path: %s\n  ids_dataset: ids\n  attributes: [tenant, price]\n"
            "search:\n  metric: inner_product\n  k_max: 50\n  batch_max: 16\n"
            "engine:\n  backend: cpu\n  threads: 1\n"
            "service:\n  host: 127.0.0.1\n  port: 0\n%s" % (self.corpus_path, service_extra)
        )
        if storage:
            text += "storage:\n  dir: %s\n  capacity_rows: 150\n" % os.path.join(self.dir, "storage")
        with open(config, "w") as f:
            f.write(text)
        self.port_file = os.path.join(self.dir, "port")
        self.log_path = os.path.join(self.dir, "serve.log")
        cmd = [args.mpiexec, "-n", str(ranks)] + shlex.split(args.mpiexec_flags) + [
            args.cli, "serve", "-c", config, "--port-file", self.port_file]
        print("$ " + " ".join(cmd), flush=True)
        self.log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.port = 0
        self._wait_ready(90)
        self.url = "%s://127.0.0.1:%d" % ("https" if self.ssl else "http", self.port)

    def _wait_ready(self, timeout_s):
        t0 = time.time()
        while time.time() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError("serve exited early:\n" + self.log())
            if not self.port and os.path.exists(self.port_file):
                try:
                    with open(self.port_file) as f:
                        self.port = int(f.read())
                except ValueError:
                    pass
            if self.port:
                try:
                    url = "%s://127.0.0.1:%d/readyz" % ("https" if self.ssl else "http", self.port)
                    with urllib.request.urlopen(url, timeout=5, context=self.ssl) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError("serve not ready after %d s:\n%s" % (timeout_s, self.log()))

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def close(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log_file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def add_arguments(ap):
    ap.add_argument("--cli", required=True, help="the shardtopk binary")
    ap.add_argument("--mpiexec", required=True, help="mpiexec")
    ap.add_argument("--mpiexec-flags", default="", help="extra mpiexec flags, one string")
