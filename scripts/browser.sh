#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the browser test (no browser downloads of our own). Idempotent.
# Exits non-zero when they cannot be installed: the browser test then fails, it is never skipped.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
echo "[setup] installing Debian's chromium and chromium-driver for the browser test"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null
/usr/bin/chromium --version
