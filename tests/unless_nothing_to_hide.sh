#!/bin/sh
# Runs the command given, unless TROUPE_HIDE_AVX512 is set on a processor without AVX-512,
# where the run would repeat the one without it: then exits 77, which CTest reports as
# skipped (tests/skip.h does the same for test executables).
if [ -n "${TROUPE_HIDE_AVX512:-}" ] && [ "$TROUPE_HIDE_AVX512" != 0 ] && ! grep -qw avx512f /proc/cpuinfo; then
  echo "SKIPPED: TROUPE_HIDE_AVX512 is set, but this processor has no AVX-512 to hide"
  exit 77
fi
exec "$@"
