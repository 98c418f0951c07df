#!/usr/bin/env bash
# Makes sure a headless Chromium is on this machine for the browser tests (test/browser/), and
# prints its path on stdout. Debian's `chromium` package: playwright-core drives it as it is
# (no browser download of its own). Quick when it is already installed.
#
#   bash scripts/setup-browser.sh          # → /usr/bin/chromium
#
# FV_CHROMIUM=/path/to/chrome skips the install and uses that browser.
set -euo pipefail

if [ -n "${FV_CHROMIUM:-}" ]; then
  [ -x "$FV_CHROMIUM" ] || { echo "setup-browser: FV_CHROMIUM=$FV_CHROMIUM is not an executable" >&2; exit 1; }
  echo "$FV_CHROMIUM"
  exit 0
fi

find_browser() {
  for candidate in /usr/bin/chromium /usr/bin/chromium-browser /usr/bin/google-chrome; do
    if [ -x "$candidate" ]; then echo "$candidate"; return 0; fi
  done
  return 1
}

if browser="$(find_browser)"; then
  echo "$browser"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-browser: no Chromium here and no apt-get to install it; install Chromium and set FV_CHROMIUM to its path" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup-browser: installing Chromium needs root (or sudo)" >&2; exit 1; }
  sudo="sudo"
fi
echo "setup-browser: installing Debian's chromium (apt-get)..." >&2
# A lock held by another apt run is waited for, not failed on.
$sudo apt-get -o DPkg::Lock::Timeout=300 update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
find_browser || { echo "setup-browser: chromium installed but not found in /usr/bin" >&2; exit 1; }
