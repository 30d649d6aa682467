#!/usr/bin/env bash
# Debian packages the tests need besides Python's (scripts/browser.sh's Chromium, scripts/postgres.sh's
# PostgreSQL): `scripts/debian-packages.sh PACKAGE...` installs them with apt-get (through `sudo -n` when not
# root). Exits non-zero when they cannot be installed; the test that needs them then fails, it is never skipped.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo -n"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >/dev/null
$SUDO apt-get install -y -q --no-install-recommends "$@" >/dev/null
