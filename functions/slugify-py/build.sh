#!/usr/bin/env bash
# Nothing to build: python3 runs slugify.py directly. This checks that it compiles.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m py_compile slugify.py && rm -rf __pycache__
