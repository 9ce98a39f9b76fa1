# Reads a CTest log (Testing/Temporary/LastTest.log) and prints one line per skipped test case:
# its reason. GoogleTest writes "FILE:LINE: Skipped", the GTEST_SKIP() message, then
# "[  SKIPPED ] Suite.Case"; Python's unittest "test_x (...) ... skipped 'reason'".
# GoogleTest colours its lines when the terminal it inherits looks like one (TERM=xterm): the
# colour codes are taken out first.
{ gsub(/\033\[[0-9;]*m/, "") }
/: Skipped$/ { skip = 1; reason = ""; next }
skip && /^\[  SKIPPED \] / { print (reason == "" ? "(no reason given)" : reason); skip = 0; next }
skip && NF { reason = reason (reason == "" ? "" : " ") $0; next }
/ \.\.\. skipped '.*'$/ { sub(/.* \.\.\. skipped '/, ""); sub(/'$/, ""); print; next }
