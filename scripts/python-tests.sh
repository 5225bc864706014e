#!/usr/bin/env bash
# The Python package's tests (crates/python): a virtual environment under
# target/pyenv with maturin, pytest, Scrapy and redis-py (installed once;
# later runs reuse it), the extension built into it by maturin, then pytest.
# Run by scripts/test.sh after the Rust tests (it needs target/release/bloomgate).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyenv
if [ ! -x "$venv/bin/python" ]; then
  echo "python-tests.sh: creating $venv"
  python3 -m venv "$venv" || {
    # Debian keeps venv in its own package.
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$venv"
  }
fi
need=()
for spec in maturin:maturin pytest:pytest scrapy:scrapy 'redis:redis>=5' scrapy_redis:scrapy-redis; do
  mod=${spec%%:*}
  "$venv/bin/python" -c "import $mod" >/dev/null 2>&1 || need+=("${spec#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "python-tests.sh: installing ${need[*]}"
  "$venv/bin/python" -m pip install --quiet "${need[@]}"
fi
[ -x target/release/bloomgate ] || cargo build --release -p bloomgate-cli
echo "python-tests.sh: maturin develop (the bloomgate package into $venv)"
(cd crates/python && VIRTUAL_ENV="$PWD/../../$venv" "../../$venv/bin/maturin" develop --release --quiet)
echo "python-tests.sh: pytest"
"$venv/bin/python" -m pytest -q -p no:cacheprovider crates/python/tests "$@"
