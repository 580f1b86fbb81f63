#!/usr/bin/env bash
# Installs what building and testing flashpp needs, from Debian's packages, skipping what is
# already there. Safe to run repeatedly; the CUDA toolkit is optional (found at /usr/local/cuda).
set -euo pipefail

packages=(cmake ninja-build g++ make libgtest-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "flashpp: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
