#!/bin/bash
# suite-containers.sh -- the URL suites where stateless search processes
# run (containers.sh), against a gateway of their own (run.sh): a job of
# `make check` (tools/check.sh) and the second step of `make
# test-objstore`. BUILD (default build) says whose binaries.
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE/../.." || exit 1
exec bash "$HERE/run.sh" "$HERE/containers.sh"
