#!/usr/bin/env bash
# The main job on the bundled sample: build a filter from 121,570 real
# disposable e-mail domains, then check addresses and URLs against it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bg="${CARGO_TARGET_DIR:-target}/release/bloomgate"
out=${1:-${CARGO_TARGET_DIR:-target}/disposable.bgf}
mkdir -p "$(dirname "$out")"

$bg plan --items 130000 --fp 1e-4 --keys host
echo
$bg build --force --keys host --items 130000 --fp 1e-4 -o "$out" data/disposable-email-domains.txt
echo
$bg info "$out" --verify
echo
echo "Which of these are on the list?"
printf '%s\n' \
  'someone@mailinator.com' \
  'https://www.guerrillamail.com/inbox' \
  'mx1.10minutemail.com' \
  'alice@gmail.com' \
  'https://www.wikipedia.org/' \
  | $bg check --json "$out"
