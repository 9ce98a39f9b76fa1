#include "storage/segment.hpp"

#include <cstdio>
#include <cstring>

#include "shardtopk/error.hpp"
#include "storage/crc32c.hpp"

namespace shardtopk::storage {

std::string segment_name(std::uint64_t first_seq) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "wal-%020llu.log", static_cast<unsigned long long>(first_seq));
  return buf;
}

bool parse_segment_name(const std::string& name, std::uint64_t* first_seq) {
  if (name.size() != 28 || name.compare(0, 4, "wal-") != 0 || name.compare(24, 4, ".log") != 0) return false;
  std::uint64_t v = 0;
  for (std::size_t i = 4; i < 24; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    const std::uint64_t d = static_cast<std::uint64_t>(name[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *first_seq = v;
  return true;
}

namespace {

// Why the record at `off` is not whole and valid ("" when it is). Checks the checksum last:
// the cheap field checks reject most garbage first.
std::string check_record(const unsigned char* data, std::uint64_t size, std::uint64_t off, RecordHeader* h) {
  if (size - off < kRecordHeaderBytes)
    return "short record header (" + std::to_string(size - off) + " of " + std::to_string(kRecordHeaderBytes) +
           " bytes)";
  *h = read_record_header(data + off);
  if (h->type != static_cast<std::uint32_t>(WalRecordType::kUpsert) &&
      h->type != static_cast<std::uint32_t>(WalRecordType::kDelete))
    return "bad record type " + std::to_string(h->type);
  if (h->payload_bytes > kMaxPayloadBytes || pad8(h->payload_bytes) > size - off - kRecordHeaderBytes)
    return "record of " + std::to_string(h->payload_bytes) + " payload bytes runs past the end of the file (" +
           std::to_string(size - off - kRecordHeaderBytes) + " bytes left)";
  if (h->batch_offset > off || h->batch_offset < kSegmentHeaderBytes || h->batch_offset % 8 != 0)
    return "bad group-commit offset " + std::to_string(h->batch_offset);
  const std::uint64_t body = pad8(h->payload_bytes);
  const std::uint32_t crc = record_crc(crc32c(data + off + kRecordHeaderBytes, body), data + off);
  if (crc != h->crc) return "checksum mismatch";
  return "";
}

std::string at(const std::string& path, std::uint64_t off) { return "'" + path + "' at offset " + std::to_string(off); }

}  // namespace

SegmentScan scan_segment(const std::string& path, const unsigned char* data, std::uint64_t size,
                         bool allow_torn_tail, const RecordFn& fn) {
  SegmentScan s;
  s.size = size;
  const std::string herr = decode_segment_header(data, size, &s.header);
  SHARDTOPK_EXPECTS(herr.empty(), "log segment '", path, "': ", herr);
  std::uint64_t expected = s.header.first_seq;
  std::uint64_t off = kSegmentHeaderBytes;
  s.last_seq = expected - 1;
  while (off < size) {
    RecordHeader h;
    const std::string why = check_record(data, size, off, &h);
    if (why.empty()) {
      SHARDTOPK_EXPECTS(h.seq == expected, "log segment ", at(path, off), ": record has seq ", h.seq, ", expected ",
                        expected, " (sequence numbers must count up by one)");
      const unsigned char* payload = data + off + kRecordHeaderBytes;
      const WalRecord rec = decode_segment_record(h, payload, path, off);  // structure check
      SHARDTOPK_EXPECTS(rec.type == WalRecordType::kDelete || rec.dim == static_cast<std::int64_t>(s.header.dim),
                        "log segment ", at(path, off), ": record seq ", h.seq, " holds rows of dim ", rec.dim,
                        ", the segment's dim is ", s.header.dim);
      if (fn) fn(h, rec, off);
      ++s.records;
      s.last_seq = h.seq;
      ++expected;
      off += kRecordHeaderBytes + pad8(h.payload_bytes);
      continue;
    }
    // Not a whole record at `off`: a torn tail, or damage in the middle.
    SHARDTOPK_EXPECTS(allow_torn_tail, "log segment ", at(path, off), ": damaged record (", why,
                      ") in a segment that is not the last one");
    s.tail_reason = why;
    s.tail_records = 1;
    for (std::uint64_t y = off + 8; y + kRecordHeaderBytes <= size; y += 8) {
      RecordHeader later;
      if (!check_record(data, size, y, &later).empty() || later.seq < expected) continue;
      SHARDTOPK_EXPECTS(later.batch_offset <= off, "log segment ", at(path, off), ": damaged record (", why,
                        ") followed by a valid record of a later group commit at offset ", y, " (seq ", later.seq,
                        "): the log is damaged in the middle; restore it from a backup or cut it by hand");
      ++s.tail_records;  // same unfinished group commit as the torn record: dropped with it
      y += kRecordHeaderBytes + pad8(later.payload_bytes) - 8;
    }
    break;
  }
  s.end = off;
  return s;
}

}  // namespace shardtopk::storage
