#!/usr/bin/env bash
# Say loudly which message codec `make setup` left in place: the C
# accelerator (the README's speed figures need it) or the pure-Python one.
# Exits 1 if the accelerator was expected (a C compiler is
# here) but did not build, so `make setup` stops instead of going on slow.
set -uo pipefail
PY=${1:?usage: check-codec.sh PYTHON}
if "$PY" -c 'import broker.protocol._speedups, audit._tally' 2>/dev/null; then
  echo "codec: C accelerator (broker.protocol._speedups) in use; audit counting kernel: C (audit._tally)"
  exit 0
fi
if command -v cc >/dev/null 2>&1; then
  echo "************************************************************************" >&2
  echo "codec: a C accelerator (broker.protocol._speedups or audit._tally) did NOT" >&2
  echo "       build although a C compiler exists." >&2
  echo "       Samsa would run on the pure-Python codec, several times slower." >&2
  echo "       Build it by hand to see why:  $PY setup.py build_ext --inplace" >&2
  echo "************************************************************************" >&2
  exit 1
fi
echo "************************************************************************" >&2
echo "codec: pure Python (no C compiler): correct, but several" >&2
echo "       times slower than the figures in the README. Install gcc" >&2
echo "       (scripts/ensure-system-packages.sh), then: make clean setup" >&2
echo "************************************************************************" >&2
exit 0
