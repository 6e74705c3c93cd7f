#!/usr/bin/env bash
# Sets everything up (Debian packages, configure, build), then runs the default scenario:
# an MLP learning Fashion-MNIST on a cluster of one parameter-server task and two worker
# tasks in this process, with progress and the final test accuracy. Arguments go to
# `troupe run` (e.g. --steps 500, --trace /tmp/run.json).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/tools/setup.sh"
cd "$root"
exec build/troupe run scenarios/default.pbtxt "$@"
