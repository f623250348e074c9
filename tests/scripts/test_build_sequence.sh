#!/usr/bin/env bash
# The README's order, `scripts/run.sh` then `scripts/test.sh`, must leave a build that has the
# release tests: run.sh configures with NORMLAB_TESTS=OFF, and a cached OFF must not survive
# test.sh's configure. Replays the two scripts' own build.sh lines (configure only, into a temp
# build dir) and asks ctest what it would run. Also: every ctest call in the scripts fails when it
# finds no tests (--no-tests=error). Takes seconds (cmake configure, no compilation).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*" >&2; exit 1; }

build_line() {  # the line of script $1 that calls scripts/build.sh
  local n
  n=$(grep -c '^scripts/build.sh ' "$1" || true)
  [ "$n" = "1" ] || fail "$1 has $n lines calling scripts/build.sh, expected 1"
  grep '^scripts/build.sh ' "$1"
}
test_count() {  # tests ctest lists in build dir $1
  ctest --test-dir "$1" -N | sed -n 's/^Total Tests: *//p'
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run_line=$(build_line scripts/run.sh)
test_line=$(build_line scripts/test.sh)
export BUILD_DIR="$tmp/build" NORMLAB_CONFIGURE_ONLY=1 WERROR=OFF

bash -euc "$run_line" || fail "run.sh's configure failed: $run_line"
n=$(test_count "$BUILD_DIR")
[ "$n" = "0" ] || fail "after run.sh's configure ($run_line) ctest lists $n tests; expected 0"

bash -euc "$test_line" || fail "test.sh's configure failed: $test_line"
n=$(test_count "$BUILD_DIR")
[ -n "$n" ] && [ "$n" -gt 0 ] || fail "after run.sh then test.sh ($test_line) ctest lists no tests"
echo "run.sh then test.sh: ctest lists $n tests"

for f in scripts/*.sh tests/fuzz/run.sh; do
  while IFS= read -r line; do
    case "$line" in
      *--no-tests=error*) ;;
      *) fail "$f: ctest without --no-tests=error: $line" ;;
    esac
  done < <(grep -E '^[^#]*\bctest ' "$f" || true)
done
echo "every ctest call in scripts/ fails on no tests"
