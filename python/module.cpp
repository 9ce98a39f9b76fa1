// The Python module `shardtopk`: bindings, docstrings and the mapping of errors to Python
// exceptions. The API is described in docs/PYTHON.md and typed in shardtopk.pyi.
#include <pybind11/pybind11.h>

#include "dlpack_io.hpp"
#include "py_index.hpp"
#include "shardtopk/communicator.hpp"
#include "shardtopk/engine.hpp"
#include "shardtopk/error.hpp"
#include "shardtopk/ordering.hpp"
#include "shardtopk/types.hpp"

namespace py = pybind11;
using shardtopk::python::PyIndex;

namespace {

// Created once and never released: the module's exception types live as long as the process.
PyObject* g_remote_error = nullptr;
PyObject* g_comm_error = nullptr;
PyObject* g_capacity_error = nullptr;

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const shardtopk::CommError& e) {
    PyErr_SetString(g_comm_error, e.what());
  } catch (const shardtopk::RemoteError& e) {
    PyErr_SetString(g_remote_error, e.what());
  } catch (const shardtopk::WriteError& e) {
    switch (e.kind()) {
      case shardtopk::WriteError::Kind::kReadOnly: PyErr_SetString(PyExc_PermissionError, e.what()); break;
      case shardtopk::WriteError::Kind::kCapacity: PyErr_SetString(g_capacity_error, e.what()); break;
      case shardtopk::WriteError::Kind::kInvalid: PyErr_SetString(PyExc_ValueError, e.what()); break;
    }
  } catch (const shardtopk::Error& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const shardtopk::InternalError& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

constexpr const char* kModuleDoc = R"doc(
shardtopk: exact top-k search over a corpus resident in GPU (or host) memory, in this process.

    import shardtopk
    index = shardtopk.Index.from_arrays(vectors, metric="cosine")       # or Index.open("c.yaml")
    ids, scores = index.search(queries, k=10)     # numpy -> numpy; torch/CuPy on the GPU -> device arrays

    ids, scores = index.search(queries, k=10, filter={"eq": {"tenant": 7}})   # docs/FILTERS.md

Exceptions: ValueError for bad input (the command line's messages), shardtopk.RemoteError when a
rank failed, shardtopk.CommError when a collective failed or timed out (the job must end).
PAD_ID (2**63 - 1, never a row's id) marks the slots past a query's real results. See
docs/PYTHON.md.
)doc";

constexpr const char* kIndexDoc = R"doc(
One rank's part of a sharded exact top-k index (ShardedIndex).

Run alone (one process: one shard, the whole corpus) or under ``mpirun -np P python app.py``
(P ranks, one shard each, one GPU per rank): rank 0's ``search`` calls drive the collective
search; ranks 1 .. P-1 call ``follow()`` (or ``close()``, or leave a ``with`` block), which
serves rank 0's searches until rank 0 closes the index.

Ordering: higher score first (l2: smaller squared distance first); equal scores: smaller id
first. Results are bit-identical whatever the batch, its size or the number of ranks.
)doc";

constexpr const char* kOpenDoc = R"doc(
open(config_path, **overrides) -> Index

Load the corpus named by a YAML config (configs/example.yaml lists every key) on every rank
(collective under mpirun). ``overrides`` set config keys as ``--set`` does on the command line:
the keyword name with ``__`` for ``.`` (``engine__backend="cpu"``, ``search__k_max=100``), or a
dotted key through a dict (``**{"engine.backend": "cpu"}``). Values: str, int, float, bool, or a
list of str (comma-joined).

Raises ValueError for a bad config, override or corpus file (this rank's own failure),
shardtopk.RemoteError when another rank failed to load, shardtopk.CommError on a timeout.
Deprecated spellings in the config give a FutureWarning.
)doc";

constexpr const char* kFromArraysDoc = R"doc(
from_arrays(vectors, ids=None, metric="inner_product", dtype="float32", k_max=1024,
            batch_max=256, backend="auto", attributes=None, **overrides) -> Index

Build an index from rows in host memory.

vectors    [rows, dim] real numbers (numpy, or anything numpy.asarray reads: a list, a CPU
           tensor); converted to float32 (a copy only when they are not C-contiguous float32).
ids        [rows] integers, unique (int64 range, not 2**63-1), or None for row positions 0 ..
           rows-1. An invalid device query's results use id -1 (with NaN scores).
metric     "inner_product", "cosine" (rows are normalised at build) or "l2" (squared distance).
dtype      storage of the resident rows: "float32", "float16", "bfloat16"; scores are computed
           in float32 with float32 queries.
k_max      largest k a search may ask for (sizes buffers; search.k_max).
batch_max  largest number of queries searched together (sizes buffers; search.batch_max);
           larger batches are searched batch_max at a time.
backend    "auto" (CUDA when a GPU is visible), "cuda" or "cpu" (engine.backend).
attributes None, or a dict {name: [rows] values} of per-row attributes that filters name
           (docs/FILTERS.md): integers (or bools) are int64 attributes, reals float64 (no NaN);
           at most 64.
overrides  other config keys, as for Index.open (engine__threads=4, comm__timeout_s=30, ...).

Under mpirun every rank passes the same full arrays; rank r keeps rows shard_rows(rows, P, r)
(contiguous, balanced) and, with CUDA, uses GPU local_rank. Collective.

Raises ValueError for bad input (shape, dtype, non-finite value, duplicate id, zero norm under
cosine, an out-of-range option, an attribute of another length or type, NaN in an attribute),
shardtopk.RemoteError when another rank failed.
)doc";

constexpr const char* kSearchDoc = R"doc(
search(queries, k=None, *, filter=None, min_score=None, max_distance=None, limit=None,
       search_after=None, count_only=False, stats=False, stream=None, out=None)
    -> (ids, scores), or (ids, scores, stats) with an order argument

The k best rows of each query, best first. Rank 0 only (other ranks: follow()).

queries  [batch, dim] or [dim] (a batch of one) float32, C-contiguous:
         - numpy array (or a list, or any host DLPack object): host path; returns numpy arrays
           ids int64 [batch, k] and scores float32 [batch, k]. Waits for the answer.
         - a DLPack object on the index's GPU (torch.Tensor, cupy.ndarray, jax.Array): device
           path; returns two shardtopk.DeviceArray (ids int64 [batch, k], scores float32
           [batch, k]) in device memory, written in the order of the stream (below). On one rank
           the call returns without waiting for the GPU (batch 1; larger batches wait for the
           engine's candidate check); under mpirun it returns once the collectives are done.
k        1 .. min(k_max, rows). Required, unless limit (the same number) or count_only is given.
filter   None, or one filter for every query: a dict in the filter language of docs/FILTERS.md
         ({"eq": {"tenant": 7}}, {"range": {"year": [2019, None]}}, {"ids_in": [3, 17]}, all /
         any / not), or its JSON text; compiled once per call against the index's attributes.
         A query's answer is then the exact top k of the rows that pass; when fewer than k pass,
         the rest of its row is padding: ids PAD_ID (2**63 - 1, never a row's id) and scores -inf
         (+inf for l2). Real results per query: (ids != shardtopk.PAD_ID).sum(axis=1).
stream   device path: the CUDA stream the search is ordered on: an int (cudaStream_t handle, 0 =
         legacy default stream), a torch.cuda.Stream or a cupy.cuda.Stream. Default: the
         producer's current stream (PyTorch, CuPy), else the legacy default stream. The queries
         are taken with queries.__dlpack__(stream=...), so the producer's pending work on them
         comes first; work queued on the stream afterwards sees the answer.
out      (ids, scores) to write into instead of allocating: numpy arrays for host queries, or
         DLPack device arrays (torch, CuPy) of shape [batch, k], int64 and float32, on the
         index's GPU. Returned as given.

Ranges, pages and counts (host queries, CPU engine; exact and the same at any rank count):
min_score     inner_product, cosine: only rows scoring >= min_score. max_distance, l2: only
              rows at squared distance <= max_distance. A number for every query, or a sequence
              of [batch] numbers; rounded once to the float32 that keeps exactly the same rows.
              stats["total"] counts every row within the bound that passes the filter, past k too.
limit         k under another name (give one of them).
search_after  (score, id) for every query, or a sequence of [batch] such pairs: only rows
              strictly after that pair in the order (the next page). Pass the previous answer's
              stats["next"] (or one entry of it) as it is.
count_only    with min_score / max_distance: the counts alone; ids and scores are [batch, 0]
              (k defaults to 1; out= is refused).
stats         True: the third value for a plain top-k too.

With any of these, search returns (ids, scores, stats), stats a dict of per-query values:
  "total"         int64 [batch]: rows within the query's bound passing the filter (-1: no bound)
  "rows_scanned"  int64 [batch]: live rows the query was evaluated against (every rank's)
  "rows_passing"  int64 [batch]: live rows passing the filter (rows_scanned without one)
  "count"         int32 [batch]: real results in the query's row (0 with count_only)
  "next"          list of [batch]: (score, id) of the query's last result when its row is full
                  (k results: the next page's search_after), None when nothing follows; left
                  out with count_only.

Scores: similarity (inner_product, cosine) or squared distance (l2). A device query with a
non-finite value (or zero norm under cosine) gets ids -1 and NaN scores in its row; a host
query like that raises ValueError naming it. Batches larger than batch_max are searched
batch_max at a time (same answers). The GIL is released while searching.

Raises ValueError for bad input (dimension, dtype, layout, k out of range, NaN/Inf in host
queries, a bad filter, a bound or search_after that is not a finite float32 or of the wrong
length, the other metric's bound, both k and limit, count_only without a bound, an order
argument with device queries or on the CUDA engine: named as the command line names it, a
closed index), TypeError without k, limit or count_only, shardtopk.RemoteError when a rank's
search failed (the index stays usable), shardtopk.CommError when a collective timed out.
)doc";

constexpr const char* kRankOfDoc = R"doc(
rank_of(query, ids, *, filter=None) -> (ranks, scores)

The exact 1-based rank of each of `ids` for `query` among the live rows passing `filter`:
1 + the rows ahead of it in the order (a higher score, or an equal score and a smaller id; l2:
a smaller distance). Rank 0 only. Two collective searches.

query   [dim] (or [1, dim]) float32, host memory (a list is converted).
ids     [n] integers, 1 <= n <= min(batch_max, k_max), each a live row's id; repeats allowed.
filter  None, or a filter as for search(); an id the filter does not pass gets the rank it
        would have.

Returns ranks int64 [n] and scores float32 [n] (similarity; l2: squared distance), in the order
of `ids`. Raises ValueError for an id no live row has (naming it), n out of range, a bad query
or filter, the CUDA engine; shardtopk.RemoteError / CommError as search().
)doc";

}  // namespace

PYBIND11_MODULE(shardtopk, m) {
  m.doc() = kModuleDoc;
  m.attr("__version__") = shardtopk::version();

  g_remote_error = PyErr_NewExceptionWithDoc(
      "shardtopk.RemoteError",
      "A rank failed: its start-up or its part of a search. The message names each failing rank "
      "and its reason. The index stays usable after a failed search.",
      PyExc_RuntimeError, nullptr);
  g_comm_error = PyErr_NewExceptionWithDoc(
      "shardtopk.CommError",
      "A collective between ranks failed or timed out (comm.timeout_s): the job must end.", PyExc_RuntimeError,
      nullptr);
  g_capacity_error = PyErr_NewExceptionWithDoc(
      "shardtopk.CapacityError",
      "An upsert needs more new rows than the index has free slots (storage.capacity_rows per rank); "
      "nothing was written. Delete rows, snapshot and restart with a larger capacity.",
      PyExc_RuntimeError, nullptr);
  if (!g_remote_error || !g_comm_error || !g_capacity_error) throw py::error_already_set();
  m.attr("RemoteError") = py::handle(g_remote_error);
  m.attr("CapacityError") = py::handle(g_capacity_error);
  m.attr("CommError") = py::handle(g_comm_error);
  py::register_exception_translator(&translate);

  m.def("built_with_cuda", &shardtopk::built_with_cuda, "True when the module was compiled with the CUDA engine.");
  m.def("cuda_available", &shardtopk::cuda_available,
        "True when the module was compiled with CUDA and a GPU is visible (backend 'auto' then uses it).");

  shardtopk::python::bind_device_array(m);
  m.attr("PAD_ID") = shardtopk::kPadId;

  py::class_<PyIndex>(m, "Index", kIndexDoc)
      .def_static("open", &PyIndex::open, py::arg("config_path"), kOpenDoc)
      .def_static("from_arrays", &PyIndex::from_arrays, py::arg("vectors"), py::arg("ids") = py::none(),
                  py::arg("metric") = "inner_product", py::arg("dtype") = "float32", py::arg("k_max") = 1024,
                  py::arg("batch_max") = 256, py::arg("backend") = "auto", py::arg("attributes") = py::none(),
                  kFromArraysDoc)
      .def("search",
           [](PyIndex& self, py::object queries, py::object k, py::object filter, py::object min_score,
              py::object max_distance, py::object limit, py::object search_after, bool count_only, bool stats,
              py::object stream, py::object out) {
             shardtopk::python::OrderArgs order;
             order.min_score = std::move(min_score);
             order.max_distance = std::move(max_distance);
             order.search_after = std::move(search_after);
             order.count_only = count_only;
             order.stats = stats;
             return self.search(std::move(queries), std::move(k), std::move(filter), std::move(limit), order,
                                std::move(stream), std::move(out));
           },
           py::arg("queries"), py::arg("k") = py::none(), py::kw_only(), py::arg("filter") = py::none(),
           py::arg("min_score") = py::none(), py::arg("max_distance") = py::none(), py::arg("limit") = py::none(),
           py::arg("search_after") = py::none(), py::arg("count_only") = false, py::arg("stats") = false,
           py::arg("stream") = py::none(), py::arg("out") = py::none(), kSearchDoc)
      .def("rank_of", &PyIndex::rank_of, py::arg("query"), py::arg("ids"), py::kw_only(),
           py::arg("filter") = py::none(), kRankOfDoc)
      .def("upsert", &PyIndex::upsert, py::arg("ids"), py::arg("vectors"), py::arg("attributes") = py::none(),
           R"doc(
upsert(ids, vectors, attributes=None) -> {"upserted": n, "seq": s}

Insert rows, or replace those whose id is live (a delete and an insert). Rank 0 only; the index
must have a storage directory (storage.dir: Index.open with it in the config, or
from_arrays(..., storage__dir=...)). Returns once the write is in the write-ahead log on stable
storage and applied on every rank: every later search sees it, none sees part of it.

ids         [n] integers, distinct, not PAD_ID.
vectors     [n, dim] real numbers (converted to float32), finite.
attributes  None, or {name: [n] values}: every corpus attribute (info()["attributes"]), integers
            for int64, reals or integers for float64 (an integer must be a float64 value
            exactly, else ValueError, as in filters; no NaN).
seq         the write's sequence number in the log.

Raises ValueError for bad input (naming the id, row or column), PermissionError on a read-only
index, shardtopk.CapacityError when the new rows do not fit (storage.capacity_rows); nothing is
written then.
)doc")
      .def("remove", &PyIndex::remove, py::arg("ids"), R"doc(
remove(ids) -> {"deleted": n, "seq": s}

Delete rows by id ([n] integers, distinct); ids that are not live are ignored (n counts those
that were). Rank 0 only; durable and visible on return, as upsert(). Raises ValueError (bad
ids), PermissionError (read-only index).
)doc")
      .def("remove_matching", &PyIndex::remove_matching, py::arg("filter"), R"doc(
remove_matching(filter) -> {"deleted": n, "seq": s}

Delete every live row that passes `filter` (a dict or JSON text in search's filter language,
docs/FILTERS.md). Rank 0 only; durable and visible on return. Raises ValueError (bad filter),
PermissionError (read-only index).
)doc")
      .def("snapshot", &PyIndex::snapshot, R"doc(
snapshot() -> {"path": str, "seq": s, "rows": n}

Write a base snapshot of the live rows (atomically: a new file, then the manifest) and remove the
log records it holds. A restart then loads the snapshot and replays only later records. Rank 0
only. Raises PermissionError (read-only index), ValueError when a file operation failed (the
previous snapshot and the whole log stay).
)doc")
      .def("follow", &PyIndex::follow, R"doc(
follow() -> None

Ranks 1 .. P-1: serve rank 0's searches until rank 0 closes the index; the index is then closed
here too. Blocks without the GIL (Ctrl-C does not interrupt it; ending rank 0 does). Raises
ValueError on rank 0, shardtopk.CommError when a collective failed or timed out.
)doc")
      .def("close", &PyIndex::close, R"doc(
close() -> None

Collective. Rank 0: end the followers' loops and free this rank's index. Other ranks: serve
rank 0's remaining searches until it closes (as follow()), then free. Idempotent; every open
index is closed at interpreter exit, before MPI is finalised.
)doc")
      .def("info", &PyIndex::info, R"doc(
info() -> dict

rows (whole corpus), dim, metric, dtype (storage), engine ('cpu' or 'cuda'), device ('cpu' or
'cuda:N', this rank's), device_name, ranks, rank, k_max, batch_max, comm ('mpi' or 'nccl'),
resident_bytes (this rank's engine and index buffers), attributes ({name: 'int64' | 'float64'},
what filters may name), max_filters (distinct filters one batch of batch_max takes), closed,
writable (a storage directory: upsert/remove work); on rank 0 of an open writable index also
live_rows, capacity_rows, tombstones, applied_seq, snapshot_seq, log_bytes.
)doc")
      .def_property_readonly("rank", &PyIndex::rank, "this process's rank (0 drives the searches)")
      .def_property_readonly("ranks", &PyIndex::ranks, "number of ranks (MPI world size)")
      .def_property_readonly("dim", &PyIndex::dim, "dimension of a row")
      .def_property_readonly("closed", &PyIndex::closed, "True once close() (or follow()) has ended it")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyIndex& self, py::args) {
        self.close();
        return false;
      })
      .def("__repr__", [](PyIndex& self) {
        const py::dict i = self.info();
        return "shardtopk.Index(rows=" + std::string(py::str(i["rows"])) + ", dim=" + std::string(py::str(i["dim"])) +
               ", metric=" + std::string(py::str(i["metric"])) + ", engine=" + std::string(py::str(i["engine"])) +
               ", device=" + std::string(py::str(i["device"])) + ", ranks=" + std::string(py::str(i["ranks"])) +
               (self.closed() ? ", closed" : "") + ")";
      });

  // Every open index is closed, then MPI finalised, when the interpreter exits (before modules
  // are torn down; an Index still referenced then is closed and later freed as a closed one).
  py::module_::import("atexit").attr("register")(py::cpp_function([] { PyIndex::close_all_and_finalize(); }));
}
