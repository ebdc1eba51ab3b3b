#!/usr/bin/env bash
# The dashboard's browser tests drive Debian's chromium through chromium-driver. Install
# them when missing: as root, or with sudo when it needs no password. apt-get update runs
# only when the install fails without it. Never fails the run itself: in CI the browser
# tests fail with a clear message when the browser is still missing; elsewhere they skip.
set -uo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "browser tests: no apt-get here; install ${need[*]} to run them" >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "browser tests: installing ${need[*]} needs root; run apt-get install ${need[*]}" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
install=("${as_root[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}")
if ! "${install[@]}" >/dev/null 2>&1; then
  "${as_root[@]}" apt-get update -qq >/dev/null 2>&1
  "${install[@]}" >/dev/null 2>&1 || echo "browser tests: could not install ${need[*]}" >&2
fi
exit 0
