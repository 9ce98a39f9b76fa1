# Reads a libFuzzer/sanitizer log; prints "libhdf5" when every stack of the first report starts
# (after sanitizer, libFuzzer and libc frames) inside libhdf5, i.e. the memory the report is
# about was allocated, freed and touched by the library itself; prints "ours" otherwise.
# A stack is a run of "    #N 0x..." lines; the report ends at "SUMMARY:".
function runtime(line) {
  return line ~ /__interceptor_|__sanitizer|__asan|__ubsan|__lsan|fuzzer::|in malloc |in calloc |in realloc |in free |in strdup |in strndup |in memcpy |in memmove |in memset |in strlen |in operator new|in operator delete|libc\.so|sysdeps\/|libstdc\+\+|in raise |in abort |pthread_kill|_start|__libc_start|in main \(/
}
# A frame inside the library's shared object (by its file name: the differential target's own
# libhdf5_view and libhdf5_rows are not the library).
function in_lib(line) {
  return line ~ /\/libhdf5[A-Za-z0-9_]*\.so/
}
# A hang is never the library's alone. One allocation over -malloc_limit_mb ("out-of-memory
# (malloc(N))") comes with the stack of that malloc and is judged by it like any other report
# (libhdf5 asks for up to 16 GB on damaged files: regressions/libhdf5/h5c_protect_16gb_malloc.h5).
/ERROR: libFuzzer: timeout/ { slow = 1 }
# RSS over -rss_limit_mb ("out-of-memory (used: N Mb ...)") is judged by ASan's live-heap profile
# that follows it ("Live Heap Allocations: B bytes ...", then contexts "N byte(s) (P%) in K
# allocation(s)", each with its allocation stack). It is libhdf5's only when the profile explains
# the RSS (live bytes at least half of it) and libhdf5's contexts hold the most bytes, shardtopk's
# (stacks that leave the runtime outside libhdf5) under a quarter of that (a 3 GB realloc inside
# the library: h5c_protect_3gb_realloc.h5). A profile that does not explain the RSS (a block
# being allocated when the watchdog sampled; launch/fuzz.sh's max_allocation_size_mb refuses
# such blocks) or no profile at all: shardtopk's.
/ERROR: libFuzzer: out-of-memory \(used:/ { rss = 1; s = $0; sub(/.*used: /, "", s); used_mb = s + 0 }
/^Live Heap Allocations: [0-9]+ bytes/ { live_bytes = $4 + 0 }
/^[0-9]+ byte\(s\) \([0-9]+%\) in [0-9]+ allocation\(s\)/ { context_bytes = $1 + 0 }
# glibc's stack-protector abort: shardtopk and the fuzz targets are built without stack
# protector (no __stack_chk_fail in the binary), Debian's libhdf5 with it, so the smashed frame
# is the library's (the unwinder may crash on it, so no stack and no input are kept).
/\*\*\* stack smashing detected \*\*\*/ { smashed = 1 }
# A heap-buffer-overflow whose address ASan describes by a *freed* chunk ("freed by thread"):
# that chunk is only the nearest one in the heap (in quarantine, so no live buffer anyone was
# given), and its free and allocation stacks say nothing about who overflowed what; the access
# stack alone decides (attr_table_overflow_next_to_freed_chunk.h5: libhdf5 reading 114 bytes
# past a freed string of ours). A
# live neighbour ("allocated by thread" without "freed by") still counts: it may be our buffer.
/ERROR: AddressSanitizer: heap-buffer-overflow/ { overflow = 1 }
# A heap-use-after-free in H5A__compact_build_table (fuzz/README.md; under H5Aopen_by_idx in
# inspect_file's attribute loop, whose only pointer argument is the literal "/"): the library
# reads through a stale pointer of its own, and the freed chunk ASan describes may since have
# been reused and freed by anyone (attr_table_use_after_free_of_our_freed_chunk.h5: a std::map
# node of shardtopk's from the previous input). No buffer of ours reaches that call, so the access stack decides.
# Likewise a use-after-free made by libhdf5 (the access stack's first frame outside the runtime is
# the library's) under the differential target's reference read, libhdf5_view or libhdf5_rows:
# those calls hand libhdf5 a file name and a buffer the target allocated for that read, and
# shardtopk leaves no pointer of its own in the library between calls, so the freed chunk was
# reached through a pointer of libhdf5's (regressions/libhdf5/chunk_shape_past_dataset_wild_read.h5:
# a wild read that ASan describes by a string libFuzzer freed). Elsewhere a use-after-free keeps
# the general rule: a dangling pointer of ours handed to the library would look the same.
/ERROR: AddressSanitizer: heap-use-after-free/ { uaf = 1 }
/^    #0 / { stackno++ }
stackno == 1 && /H5A__compact_build_table/ { uaf_site = 1 }
stackno == 1 && /in \(anonymous namespace\)::libhdf5_(view|rows)\(/ { reference_read = 1 }
/^freed by thread/ { freed_neighbour = 1 }
/^    #0 / {
  skip = overflow && freed_neighbour
  if (skip) decided = 1; else { decided = 0; nstacks++ }
}
/^    #[0-9]+ / {
  if (!decided && !runtime($0)) {
    decided = 1
    if (stackno == 1) access_in_lib = in_lib($0)
    if (in_lib($0)) { lib++; lib_bytes += context_bytes } else ours_bytes += context_bytes
  }
}
/^SUMMARY:/ { exit }
END {
  if (rss) {
    explained = used_mb > 0 && live_bytes >= used_mb * 1048576 / 2
    print (explained && lib_bytes > 0 && 4 * ours_bytes < lib_bytes) ? "libhdf5" : "ours"
    exit
  }
  if (!slow && (smashed || (uaf && (uaf_site || (reference_read && access_in_lib))) || (nstacks > 0 && lib == nstacks)))
    print "libhdf5"
  else
    print "ours"
}
