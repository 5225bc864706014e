#!/usr/bin/env bash
# The test command (README, and CI through .ci/run): installs what the tests
# need when it is missing, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
# nginx and Postfix for the front-end tests (crates/server/tests/front_ends.rs).
PATH="$PATH:/usr/sbin:/sbin" command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
PATH="$PATH:/usr/sbin:/sbin" command -v postfix >/dev/null 2>&1 || need_apt+=(postfix)
# Squid 5 for the squid-helper tests (crates/squid/tests/squid.rs), curl to ask it.
[ -x /usr/sbin/squid ] || need_apt+=(squid)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "test.sh: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  # Postfix's package asks how to configure the machine's mail: not at all
  # (the test runs a private instance of its own).
  echo "postfix postfix/main_mailer_type select No configuration" | $SUDO debconf-set-selections
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! python3 -c 'import redis' >/dev/null 2>&1; then
  echo "test.sh: installing redis-py"
  python3 -m pip install --quiet 'redis>=5' || python3 -m pip install --quiet --break-system-packages 'redis>=5'
fi

echo "test.sh: cargo fmt --check"
cargo fmt --all -- --check
echo "test.sh: cargo clippy"
cargo clippy --workspace --all-targets --release -- -D warnings
# The redis-cli and redis-py tests must run, not skip, when started from here.
export BLOOMGATE_REQUIRE_CLIENTS=1
# The SIMD kernels this CPU has must be tested against the scalar one: the
# engine's parity test fails if one of them is missing from the build.
if [ -z "${BLOOMGATE_EXPECT_KERNELS:-}" ] && [ -r /proc/cpuinfo ]; then
  kernels=scalar
  flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
  case " $flags " in *" avx2 "*) kernels="$kernels,avx2" ;; esac
  case " $flags " in *" avx2 "*" avx512f "*|*" avx512f "*" avx2 "*) kernels="$kernels,avx512" ;; esac
  export BLOOMGATE_EXPECT_KERNELS=$kernels
fi
echo "test.sh: expecting the kernels ${BLOOMGATE_EXPECT_KERNELS:-scalar}"
echo "test.sh: cargo test (release: the FP-rate and 2^33-bit tests do real work)"
cargo test --workspace --release
# The Python package and its Scrapy duplicate filter (crates/python).
echo "test.sh: Python tests"
bash scripts/python-tests.sh
