#!/bin/bash
# python.sh -- the Python binding on a published index
# (python/tests/test_objstore.py), run by `make test-objstore` with the
# gateway's environment. PYTHON is the interpreter (default /usr/bin/python3).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.."
exec "${PYTHON:-/usr/bin/python3}" -X dev -W error -m pytest -q \
    python/tests/test_objstore.py \
    python/tests/test_hnswlib.py::test_load_index_of_a_published_index
