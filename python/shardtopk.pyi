"""Type stubs of the shardtopk module (docs/PYTHON.md)."""

import os
from types import TracebackType
from typing import Any, List, Literal, Mapping, Optional, Sequence, Tuple, TypedDict, Union, overload

import numpy as np
import numpy.typing as npt

__version__: str
PAD_ID: int  # 2**63 - 1: the id of the slots past a query's real results (never a row's id)

class RemoteError(RuntimeError):
    """A rank failed (its start-up or its part of a search); the message names each rank."""

class CommError(RuntimeError):
    """A collective failed or timed out (comm.timeout_s): the job must end."""

class CapacityError(RuntimeError):
    """An upsert's new rows do not fit the free slots (storage.capacity_rows); nothing was written."""

def built_with_cuda() -> bool: ...
def cuda_available() -> bool: ...

StreamLike = Union[int, Any]  # cudaStream_t handle, torch.cuda.Stream (.cuda_stream), cupy.cuda.Stream (.ptr)
ConfigValue = Union[str, int, float, bool, Sequence[str], "os.PathLike[str]"]

class DeviceArray:
    """Answers in device memory: ids int64 or scores float32, [batch, k], row-major."""

    @property
    def shape(self) -> Tuple[int, int]: ...
    @property
    def dtype(self) -> Literal["int64", "float32"]: ...
    @property
    def device(self) -> int: ...
    @property
    def ptr(self) -> int: ...
    @property
    def stream(self) -> int: ...
    @property
    def __cuda_array_interface__(self) -> dict: ...
    def __dlpack__(
        self,
        *,
        stream: Optional[int] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def numpy(self) -> npt.NDArray[Any]:
        """Host copy; waits for the stream."""
    def __len__(self) -> int: ...

class _SearchStatsBase(TypedDict):
    total: npt.NDArray[np.int64]  # [batch] rows within the bound passing the filter; -1: no bound
    rows_scanned: npt.NDArray[np.int64]  # [batch] live rows evaluated (every rank's)
    rows_passing: npt.NDArray[np.int64]  # [batch] live rows passing the filter
    count: npt.NDArray[np.int32]  # [batch] real results per query (0 with count_only)

class SearchStats(_SearchStatsBase, total=False):
    next: List[Optional[Tuple[float, int]]]  # [batch] (score, id) when the row is full, else None; not with count_only

class Index:
    """One rank's part of a sharded exact top-k index."""

    @staticmethod
    def open(config_path: Union[str, "os.PathLike[str]"], **overrides: ConfigValue) -> "Index":
        """Load the corpus of a YAML config; overrides: engine__backend="cpu" or **{"engine.backend": "cpu"}."""
    @staticmethod
    def from_arrays(
        vectors: npt.ArrayLike,
        ids: Optional[npt.ArrayLike] = None,
        metric: Literal["inner_product", "cosine", "l2"] = "inner_product",
        dtype: Literal["float32", "float16", "bfloat16"] = "float32",
        k_max: int = 1024,
        batch_max: int = 256,
        backend: Literal["auto", "cuda", "cpu"] = "auto",
        attributes: Optional[Mapping[str, npt.ArrayLike]] = None,
        **overrides: ConfigValue,
    ) -> "Index":
        """vectors [rows, dim] on the host (every rank the same full arrays), ids [rows] or None,
        attributes {name: [rows] integers or reals} for filters."""
    @overload
    def search(
        self,
        queries: Any,
        k: int,
        *,
        filter: Optional[Union[Mapping[str, Any], str]] = None,
        stream: Optional[StreamLike] = None,
        out: Optional[Tuple[Any, Any]] = None,
    ) -> Tuple[Any, Any]:
        """queries [batch, dim] or [dim] float32 -> (ids int64 [batch, k], scores float32 [batch, k]).

        numpy in -> numpy out; a DLPack array on the index's GPU -> (DeviceArray, DeviceArray),
        ordered on `stream` (default: the producer's current stream), or `out` when given.
        filter (docs/FILTERS.md) applies to every query; slots past a query's real results hold
        PAD_ID and -inf (+inf for l2).
        """
    @overload
    def search(
        self,
        queries: Any,
        k: Optional[int] = None,
        *,
        filter: Optional[Union[Mapping[str, Any], str]] = None,
        min_score: Optional[Union[float, Sequence[float], npt.ArrayLike]] = None,
        max_distance: Optional[Union[float, Sequence[float], npt.ArrayLike]] = None,
        limit: Optional[int] = None,
        search_after: Optional[Union[Tuple[float, int], Sequence[Tuple[float, int]]]] = None,
        count_only: bool = False,
        stats: bool = False,
        out: Optional[Tuple[Any, Any]] = None,
    ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], SearchStats]:
        """Host queries: ranges (min_score; l2: max_distance), pages (search_after: a
        previous answer's stats["next"]) and counts (count_only: ids and scores [batch, 0]).

        Any of min_score, max_distance, search_after, count_only or stats=True adds the third
        value, SearchStats. Per-query values: a scalar (pair) for every query, or [batch] of them.
        """
    def rank_of(
        self, query: npt.ArrayLike, ids: npt.ArrayLike, *, filter: Optional[Union[Mapping[str, Any], str]] = None
    ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """query [dim], ids [n] live ids -> (ranks int64 [n], 1-based; scores float32 [n]) among the rows passing filter."""
    def upsert(
        self, ids: npt.ArrayLike, vectors: npt.ArrayLike, attributes: Optional[Mapping[str, npt.ArrayLike]] = None
    ) -> dict:
        """ids [n], vectors [n, dim], attributes {name: [n]} -> {"upserted": n, "seq": s}; durable and visible on return."""
    def remove(self, ids: npt.ArrayLike) -> dict:
        """ids [n] -> {"deleted": live ids removed, "seq": s}."""
    def remove_matching(self, filter: Union[Mapping[str, Any], str]) -> dict:
        """Delete every live row that passes filter -> {"deleted": n, "seq": s}."""
    def snapshot(self) -> dict:
        """Write a base snapshot of the live rows -> {"path": str, "seq": s, "rows": n}."""
    def follow(self) -> None:
        """Ranks != 0: serve rank 0's searches and writes until it closes the index."""
    def close(self) -> None:
        """Collective close (followers serve rank 0 until it closes)."""
    def info(self) -> dict: ...
    @property
    def rank(self) -> int: ...
    @property
    def ranks(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Index": ...
    def __exit__(
        self,
        exc_type: Optional[type],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Literal[False]: ...
