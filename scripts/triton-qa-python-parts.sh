#!/usr/bin/env bash
# Runs two parts of Triton's L0_backend_python against tsi, as its test.sh runs them, where the whole
# suite cannot run: test.sh stops at its first lines unless python3 is 3.12, and builds conda
# environments. The parts: python_test.py (its server flags and model folders, test.sh's own lines)
# and the request_rescheduling subtest. Run `scripts/triton-qa.sh run L0_backend_python` once first
# (it copies and readdresses the suite, then stops at the version check), with the same environment.
#
#   scripts/triton-qa-python-parts.sh        needs root or unprivileged user namespaces (unshare)
#
# What differs from test.sh, and why:
# - /dev/shm is a 1 GiB tmpfs of a private mount namespace, as Triton's CI container's is
#   (test_growth_error's sizes assume it); the network is a namespace of its own (ports 8000-8002).
# - TEST_JETSON=1: the shared-memory leak probe reads Triton's own pool layout (triton_shm_monitor,
#   a C++ module of Triton's); Jetson runs skip it the same way.
# - identity_bf16 and pytorch_fp32_fp32 are removed: they import torch (PyPI), and a model that
#   fails to load stops the server's start.
# Results go to $QA_WORK/results/L0_backend_python.jsonl and the suite's junit files, as for a
# suite run: `scripts/triton-qa.sh report` counts them.
set -euo pipefail

TSI=$(cd "$(dirname "$0")/.." && pwd)
QA_WORK=${QA_WORK:-/tmp/tsi-qa}
QA_PYTHON=${QA_PYTHON:-/usr/bin/python3}
suite=$QA_WORK/opt/tritonserver/qa/L0_backend_python
[ -f "$suite/test.sh" ] || { echo "no $suite/test.sh: run scripts/triton-qa.sh run L0_backend_python first" >&2; exit 1; }

if [ -z "${TSI_QA_IN_NAMESPACE:-}" ]; then
  exec unshare --net --pid --fork --mount-proc env TSI_QA_IN_NAMESPACE=1 QA_WORK="$QA_WORK" QA_PYTHON="$QA_PYTHON" \
    bash -c 'ip link set lo up; mount -t tmpfs -o size=1g tmpfs /dev/shm; exec "$0"' "$0"
fi

export PATH=$QA_WORK/bin:$QA_WORK/opt/tritonserver/bin:$(dirname "$QA_PYTHON"):$PATH
export PYTHONPATH=$QA_WORK/pylib:$QA_WORK/qa/common
export TSI_QA_RESULTS=$QA_WORK/results/L0_backend_python.jsonl
export NVIDIA_TRITON_SERVER_VERSION=tsi TRITON_SERVER_CPU_ONLY=1 BACKENDS=onnx TEST_JETSON=1
TRITON_SERVER_VERSION=$(node --input-type=module -e "console.log((await import('$TSI/dist/core/server.js')).TSI_VERSION)")
export TRITON_SERVER_VERSION
export TRITON_DIR=$QA_WORK/opt/tritonserver TRITON_QA_ROOT_DIR=$QA_WORK/qa
mkdir -p "$QA_WORK/results"
rm -f "$TSI_QA_RESULTS"
cd "$suite"

# test.sh's prelude (to its version checks), its python_test.py part (from after its checks to the
# server's end), then the request_rescheduling subtest as its loop runs each subtest.
check=$(grep -n '^python3 --version | grep "3.12"' test.sh | cut -d: -f1)
resume=$(grep -n '^(bash -ex setup_python_enviroment.sh)' test.sh | cut -d: -f1)
resume=$(awk -v from="$resume" 'NR > from && /^fi$/ { print NR + 1; exit }' test.sh)
stop=$(awk -v from="$resume" 'NR > from && /^kill_server$/ { print NR; exit }' test.sh)
{
  sed -n "1,$((check - 1))p" test.sh
  sed -n "${resume},${stop}p" test.sh | sed 's|^SERVER_ARGS="$BASE_SERVER_ARGS --allow-client-shm=true|rm -rf models/identity_bf16 models/pytorch_fp32_fp32\n&|'
  echo 'set +e; (cd request_rescheduling && bash -ex test.sh); echo "request_rescheduling: exit $?"'
} > test-parts.sh
# Not a .log: the prelude removes *.log.
bash test-parts.sh tsi > test-parts.out 2>&1 || true
grep -E '^(FAILED|=+ .* in )|request_rescheduling: exit|Request Rescheduling test' test-parts.out || true
echo "log: $suite/test-parts.out"
