# Reads a libFuzzer/sanitizer log; prints "libhdf5" when every stack of the first report starts
# (after sanitizer, libFuzzer and libc frames) inside libhdf5, i.e. the memory the report is
# about was allocated, freed and touched by the library itself; prints "ours" otherwise.
# A stack is a run of "    #N 0x..." lines; the report ends at "SUMMARY:".
function runtime(line) {
  return line ~ /__interceptor_|__sanitizer|__asan|__ubsan|__lsan|fuzzer::|in malloc |in calloc |in realloc |in free |in strdup |in strndup |in memcpy |in memmove |in memset |in strlen |in operator new|in operator delete|libc\.so|sysdeps\/|libstdc\+\+|in raise |in abort |pthread_kill|_start|__libc_start/
}
# A hang or a memory blow-up (RSS over -rss_limit_mb) is never the library's alone. One
# allocation over -malloc_limit_mb ("out-of-memory (malloc(N))") comes with the stack of that
# malloc and is judged by it like any other report (libhdf5 asks for up to 16 GB on damaged
# files: seen 2026-11-30, H5C_protect under H5Fopen).
/ERROR: libFuzzer: (timeout|out-of-memory)/ && !/out-of-memory \(malloc\(/ { slow = 1 }
# glibc's stack-protector abort: shardtopk and the fuzz targets are built without stack
# protector (no __stack_chk_fail in the binary), Debian's libhdf5 with it, so the smashed frame
# is the library's (seen once: the unwinder then crashed on it and no input was saved).
/\*\*\* stack smashing detected \*\*\*/ { smashed = 1 }
/^    #0 / { decided = 0; nstacks++ }
/^    #[0-9]+ / {
  if (!decided && !runtime($0)) {
    decided = 1
    if ($0 ~ /libhdf5/) lib++
  }
}
/^SUMMARY:/ { exit }
END {
  if (!slow && (smashed || (nstacks > 0 && lib == nstacks))) print "libhdf5"; else print "ours"
}
