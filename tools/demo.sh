#!/usr/bin/env bash
# Sets everything up (Debian packages, configure, build), then runs the demo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh"
cd "$root"
exec build/troupe demo --out build/demo "$@"
