#!/usr/bin/env bash
# Debian's Chromium and ChromeDriver for the browser test (no browser downloads of our own). Idempotent.
# Exits non-zero when they cannot be installed: the browser test then fails, it is never skipped.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
echo "[setup] installing Debian's chromium and chromium-driver for the browser test"
bash "$(dirname "$0")/debian-packages.sh" chromium chromium-driver
/usr/bin/chromium --version
