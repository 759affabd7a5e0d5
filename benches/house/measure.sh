#!/usr/bin/env bash
# The figures of issue 23 ("the house"), measured on a fresh clone of the committed tree so nothing built
# before counts: the cold `.ci/run` (fmt, clippy, cargo package, the tests), then `cargo test --locked` again on
# the tree it built, the size of the test executables, the largest source file, the README's length, and the
# release binary (built last, as `.ci/release` builds it, and stripped of debug information as it ships).
# Usage: benches/house/measure.sh [COMMIT]   (default HEAD). Writes a report on stdout; takes 10-20 minutes.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
commit="${1:-HEAD}"
work="$(mktemp -d)"
# Traversable by others: a test runs the binary as `nobody` (setpriv) to check a write-protected database.
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
git clone -q "$root" "$work/clone"
cd "$work/clone"
git checkout -q "$commit"
# CI runs with a copy of shared/ beside the clone; nothing in the build reads it.
secs() { local s=$SECONDS; "$@" > "$work/log" 2>&1 || { tail -30 "$work/log"; exit 1; }; echo $((SECONDS - s)); }
echo "commit: $(git rev-parse --short HEAD)"
echo "cold .ci/run: $(CI=true secs bash .ci/run) s"
echo "cargo test --locked on the built tree: $(secs cargo test --locked) s"
# Executables in target/debug/deps: the test binaries (unit tests of each crate, the integration tests) and the
# debug build of the binary itself.
exes() { find target/debug/deps -maxdepth 1 -type f -perm -u+x ! -name '*.so' ! -name '*.d' ! -name '*.rlib' "$@"; }
echo "executables in target/debug/deps: $(exes | wc -l), $(exes -printf '%s\n' | awk '{s+=$1} END {printf "%.2f GB", s/1e9}')"
echo "target/debug: $(du -sh target/debug | cut -f1)"
largest="$(find src crates -name '*.rs' -print0 | xargs -0 wc -l | grep -v ' total$' | sort -rn | head -1)"
echo "largest source file: $largest lines"
echo "README.md: $(wc -l < README.md) lines"
echo "release build: $(secs cargo build --release --locked) s"
size=$(stat -c %s target/release/optimizer)
strip --strip-debug -o "$work/optimizer.stripped" target/release/optimizer
echo "release binary: $size bytes; stripped of debug information: $(stat -c %s "$work/optimizer.stripped") bytes"
