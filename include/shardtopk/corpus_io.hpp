#pragma once
/// @file corpus_io.hpp
/// HDF5 reading of one rank's rows, inspection, and writing of corpora and results.
///
/// Every HDF5 call is checked; errors throw shardtopk::Error naming the file, the dataset and
/// the failing call. The HDF5 library's own error stack printing is switched off.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "shardtopk/shard_plan.hpp"
#include "shardtopk/types.hpp"

namespace shardtopk {

/// Shape and type of one dataset.
struct DatasetInfo {
  std::string name;                ///< full path inside the file, without the leading '/'
  std::vector<std::int64_t> dims;  ///< e.g. {N, D}
  std::string dtype;               ///< float16|float32|float64|int8..int64|uint8..uint64|string|other
  bool is_float = false;
  bool chunked = false;
  std::string filters;  ///< e.g. "deflate(4)", empty when none
};

/// Everything `shardtopk info` prints.
struct FileInfo {
  std::string path;
  std::vector<DatasetInfo> datasets;            ///< every dataset, depth first
  std::map<std::string, std::string> attributes;  ///< root attributes rendered as text
  /// The numeric ones among `attributes` (integer or float, 1 .. 16 values) as numbers:
  /// integers exactly, floats as the double nearest their shortest decimal at stored precision.
  std::map<std::string, std::vector<std::int64_t>> int_attributes;
  std::map<std::string, std::vector<double>> float_attributes;
};

/// Row-major float32 matrix on the host: `data` is [rows, cols].
struct HostMatrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<float> data;
};

/// Called as (rows_done, rows_total) after each chunk.
using ReadProgress = std::function<void(std::int64_t, std::int64_t)>;

/// List datasets and root attributes. @throws Error when the file cannot be opened as HDF5.
FileInfo inspect_file(const std::string& path);

/// Shape and type of one dataset. @throws Error naming the datasets present when it is missing.
DatasetInfo inspect_dataset(const std::string& path, const std::string& dataset);

/// The files other than `path` whose bytes reading `datasets` of `path` reads: the target file
/// of an external link, a virtual dataset's source files, a dataset's external raw storage
/// files (names as libhdf5 opens them, or relative to `path`'s folder). For refusing outputs
/// that would overwrite a job's input. Datasets that do not exist are skipped.
/// @throws Error when `path` cannot be opened as HDF5.
std::vector<std::string> dataset_files(const std::string& path, const std::vector<std::string>& datasets);

/// A root string attribute (e.g. ann-benchmarks' `distance`), or "" when absent.
std::string read_string_attribute(const std::string& path, const std::string& name);

/// Options of the row readers.
struct ReadOptions {
  std::int64_t chunk_rows = 65536;  ///< rows per block (one sink call and one progress call each)
  int threads = 0;                  ///< threads for reading, decompressing, converting, checking; 0 = all cores
  ReadProgress progress;            ///< (rows_done, rows_total) after each block, on the calling thread
  std::string label = "row";        ///< what rows are called in messages ("corpus row", "query")
  /// The engine's storage type: a finite value that it cannot hold (|x| > 65504 for float16) is
  /// refused as "out of range of float16" here, with its row and column, instead of becoming inf.
  Dtype storage = Dtype::kFloat32;
  /// Read contiguous datasets straight from the dataset's file (pread on `threads` threads) where
  /// the reader has proven that those bytes are the dataset's, and decode deflate/shuffle chunks
  /// on `threads` threads (see read_row_blocks); false: every read goes through H5Dread.
  /// Config key io.direct_reads.
  bool direct_reads = true;
  /// Convert float16 <-> float32 with the CPU's F16C instructions where it has them; false: the
  /// portable conversion (same bits, slower). Config key io.f16c.
  bool f16c = true;
};

/// How read_row_blocks reads a dataset (plan_row_reads).
enum class ReadMethod {
  kDirectContiguous,  ///< pread of the contiguous values from the dataset's file
  kDirectChunks,      ///< each chunk's stored bytes from libhdf5 (H5Dread_chunk), inflate/unshuffle here
  kHdf5,              ///< H5Dread (libhdf5 reads, decodes and converts)
};

/// The reading method chosen for a dataset, and why.
struct ReadPlan {
  ReadMethod method = ReadMethod::kHdf5;
  std::string file;    ///< the file libhdf5 found the dataset in (an external link's target, say)
  std::string reason;  ///< kHdf5: why the direct methods do not apply; empty otherwise
};

/// One block of rows handed to a RowBlockSink: [rows, cols] row-major, `format` values (4 or 2
/// bytes each), rows first_row .. first_row + rows - 1 of the dataset. Every value is finite and
/// within the range of the format and of ReadOptions::storage.
struct RowBlock {
  std::int64_t first_row = 0;  ///< dataset row of the block's first row (global row number)
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  RowFormat format = RowFormat::kFloat32;
  const void* data = nullptr;
};

/// Receives each block, in row order, on the calling thread. The block's memory may be reused
/// when the sink returns (an engine copies it, or starts an asynchronous copy from a buffer it
/// supplied through RowBlockBuffer and waits on it before handing that buffer out again).
using RowBlockSink = std::function<void(const RowBlock&)>;

/// Supplies the memory the next block is written to: at least rows x cols values of the
/// requested format (e.g. one of two pinned staging buffers, or the final host array).
using RowBlockBuffer = std::function<void*(std::int64_t first_row, std::int64_t rows)>;

/// Stream rows [range.lo, range.hi) of a 2-D float16/float32/float64 dataset in blocks of
/// `opt.chunk_rows` rows, with the values libhdf5's H5Dread gives (float64 rounded to float32,
/// to nearest even). With opt.direct_reads and a little-endian IEEE float16/32/64 type, two
/// layouts bypass libhdf5's data path: contiguous values (no external storage, allocated, inside
/// the file's allocated space) are read with pread() on `opt.threads` threads through a copy of
/// libhdf5's own descriptor of the file the dataset lives in (the opened file, or an external
/// link's target; sec2 driver), after its user block; chunks filtered with deflate, shuffle or
/// both and no other filter (every filter applied to every chunk) are read by libhdf5 as stored
/// (H5Dread_chunk) and decoded on those threads. Everything else (compact, virtual, external
/// storage, unfiltered chunks, other filters, big-endian, other float formats, other drivers)
/// goes through H5Dread.
/// Before any row is read, storage that HDF5 would silently fill is refused (virtual sources
/// missing or too short, external files missing or short, chunks or contiguous storage never
/// written, contiguous storage past the end of the file), naming the rows.
/// @param buffer  where blocks go; empty: a buffer the reader owns.
/// @throws Error as read_rows.
void read_row_blocks(const std::string& path, const std::string& dataset, RowRange range, RowFormat format,
                     const ReadOptions& opt, const RowBlockSink& sink, const RowBlockBuffer& buffer = {});

/// The method read_row_blocks would use for `dataset` with `opt` (opt.direct_reads, and the
/// proof described there), without reading any row.
/// @throws Error as read_rows for a missing or unsuitable dataset.
ReadPlan plan_row_reads(const std::string& path, const std::string& dataset, const ReadOptions& opt = {});

/// Read rows [range.lo, range.hi) of a 2-D floating-point dataset (float16/32/64, contiguous
/// or chunked/compressed) as float32, `opt.chunk_rows` rows at a time (read_row_blocks into the
/// result). Every value must be finite and within float32 (and opt.storage).
/// @throws Error on a missing dataset (listing those present), a rank other than 2, a
///   non-float dtype, a range outside the dataset, data HDF5 would fill in (see read_row_blocks),
///   a read failure, a NaN/Inf value or a value out of range (naming the global row and column).
HostMatrix read_rows(const std::string& path, const std::string& dataset, RowRange range, const ReadOptions& opt);

/// As read_rows, into memory the caller owns: `out` holds range.size() x dim floats (dim from
/// inspect_dataset). The reader's threads write it first, so memory fresh from `new float[]`
/// is faulted in on all of them (a std::vector is zeroed on one thread first: about 1.7 s for
/// 3 GB on a 2-core VM, slower than the read itself). Returns dim.
std::int64_t read_rows_into(const std::string& path, const std::string& dataset, RowRange range,
                            const ReadOptions& opt, float* out);

/// As above with default options and `chunk_rows`, `progress` and `label` given.
/// @param label  what the rows are called in messages ("corpus row", "query").
HostMatrix read_rows(const std::string& path, const std::string& dataset, RowRange range,
                     std::int64_t chunk_rows = 65536, const ReadProgress& progress = {},
                     const std::string& label = "row");

/// Read a whole 2-D float dataset (e.g. queries). Same checks as read_rows.
HostMatrix read_matrix(const std::string& path, const std::string& dataset,
                       const std::string& label = "row");

/// Read a 1-D integer dataset as int64 (e.g. `ids`). @throws Error on shape or type mismatch,
/// and on unsigned values above INT64_MAX (named with their index).
std::vector<std::int64_t> read_int64_vector(const std::string& path, const std::string& dataset);

/// Read a 1-D string dataset (fixed or variable length), e.g. GloVe's `train_words`.
std::vector<std::string> read_string_vector(const std::string& path, const std::string& dataset);

/// Read a 2-D integer dataset as int64 [rows, cols] (e.g. ann-benchmarks `neighbors`).
std::vector<std::int64_t> read_int64_matrix(const std::string& path, const std::string& dataset,
                                            std::int64_t* rows, std::int64_t* cols);

/// Creates (truncates) an HDF5 file and writes datasets and attributes into it.
class H5Writer {
 public:
  /// `exclusive`: fail when anything (a file, a symbolic link) is at `path` (H5F_ACC_EXCL)
  /// instead of truncating it.
  /// @throws Error when the file cannot be created.
  explicit H5Writer(const std::string& path, bool exclusive = false);
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;

  /// Write float32 [rows, cols] (cols = 0: a 1-D dataset of `rows`). Intermediate groups are
  /// created. `chunk_rows` > 0 writes a chunked, deflate-compressed dataset.
  void write_f32(const std::string& name, const float* data, std::int64_t rows, std::int64_t cols,
                 std::int64_t chunk_rows = 0);
  /// Write float32 values stored as IEEE half precision (float16) [rows, cols].
  void write_f16(const std::string& name, const float* data, std::int64_t rows, std::int64_t cols);
  void write_f64(const std::string& name, const double* data, std::int64_t rows, std::int64_t cols);
  void write_i64(const std::string& name, const std::int64_t* data, std::int64_t rows,
                 std::int64_t cols);
  void write_i32(const std::string& name, const std::int32_t* data, std::int64_t rows,
                 std::int64_t cols);
  void write_u8(const std::string& name, const std::uint8_t* data, std::int64_t rows,
                std::int64_t cols);
  /// Variable-length UTF-8 strings [n].
  void write_strings(const std::string& name, const std::vector<std::string>& values);

  /// Streamed writing of a matrix larger than memory: creates a [rows, cols] dataset stored as
  /// `dtype` (float32 or float16), contiguous and allocated at once, or chunked by `chunk_rows`
  /// rows with deflate level 1 when chunk_rows > 0; then write_rows fills it, in any order. One
  /// such dataset is open at a time (the next create_rows or close() ends it).
  /// @throws Error for another dtype, a bad shape, or when HDF5 refuses (its reason named).
  void create_rows(const std::string& name, Dtype dtype, std::int64_t rows, std::int64_t cols,
                   std::int64_t chunk_rows = 0);
  /// Rows [first, first + n) of the create_rows dataset from float32 values [n, cols] (float16:
  /// rounded as write_f16 does, on all cores). @throws Error outside the dataset or on HDF5 failure.
  void write_rows(std::int64_t first, std::int64_t n, const float* data);

  /// Root attributes.
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, std::int64_t value);
  void set_attr(const std::string& name, double value);

  /// Flush and close (also done by the destructor, which never throws).
  void close();

 private:
  void end_rows();

  long long file_ = -1;  // hid_t, kept opaque so this header needs no hdf5.h
  std::string path_;
  long long rows_ds_ = -1;  // the create_rows dataset (hid_t)
  std::string rows_name_;
  Dtype rows_dtype_ = Dtype::kFloat32;
  std::int64_t rows_n_ = 0, rows_cols_ = 0;
  std::vector<std::uint16_t> rows_bits_;  // float16 conversion buffer
};

}  // namespace shardtopk
