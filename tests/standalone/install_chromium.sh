#!/usr/bin/env bash
# Installs Debian's Chromium for the standalone page test (idempotent: does nothing when it is there).
# Usage: bash tests/standalone/install_chromium.sh   (as root, or with sudo available)
set -euo pipefail

if command -v chromium >/dev/null 2>&1 && chromium --version >/dev/null 2>&1; then
    echo "chromium already installed: $(chromium --version)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "installed: $(chromium --version)"
