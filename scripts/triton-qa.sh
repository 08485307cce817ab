#!/usr/bin/env bash
# Runs Triton's own qa suites (server repo, qa/L0_*) unchanged against tsi, and prints each suite's counts.
#
# Not part of `npm test` or CI: it needs checkouts of Triton's server, client and common repositories,
# which CI cannot fetch. What it changes in a suite is only where things are: a copy of qa/ is made with
# /opt/tritonserver pointing at a folder whose bin/tritonserver runs `tsi-node serve "$@"`, and
# /data/inferenceserver at the ONNX model repositories qa's own generators wrote. test.sh runs as it is,
# one suite at a time; tests needing TensorRT, libtorch, TensorFlow, CUDA or Triton's C API fail (or are
# skipped by the suite's own BACKENDS switch) and are listed as such in docs/features.md. Where this
# machine lacks them, perf_analyzer is `tsi-node perf` and sseclient-py a stand-in of the harness's.
#
#   scripts/triton-qa.sh setup              tritonclient from source (+ grpc stubs) and the shims
#   scripts/triton-qa.sh models             qa's ONNX model repositories (gen_qa_*.py --onnx)
#   scripts/triton-qa.sh run L0_io L0_...   each suite's test.sh; prints "suite  run  passed  failed"
#   scripts/triton-qa.sh report             the counts of every suite run so far in QA_WORK
#
# Environment:
#   TRITON_SERVER  a checkout of triton-inference-server/server   (default /tmp/triton-qa/server)
#   TRITON_CLIENT  a checkout of triton-inference-server/client   (default /tmp/triton-qa/client)
#   TRITON_COMMON  a checkout of triton-inference-server/common   (default /tmp/triton-qa/common)
#   TRITON_PYTHON_BACKEND  a checkout of triton-inference-server/python_backend, for the example models
#                  some suites use (default /tmp/triton-qa/python_backend)
#   QA_WORK        where the copies, models, logs and results go  (default /tmp/tsi-qa)
#   QA_PYTHON      a python with grpcio, gevent, geventhttpclient, protobuf, rapidjson, requests,
#                  grpc_tools, numpy, onnx, psutil and pytest (default /usr/bin/python3: Debian's python3-* packages)
#   QA_WHEELS      a folder with an ml_dtypes 0.5 wheel, if QA_PYTHON lacks it (default /opt/pypi/files)
#   QA_TIMEOUT     seconds one suite may run (default 1200)
#   BACKENDS       the backends a suite loops over, where it has the switch (default "onnx")
#   QA_ALL         set: also run the suites listed as needing what tsi does not have
#
# Results: a sitecustomize.py on PYTHONPATH records every unittest run (tests, failed and errored ids)
# in $QA_WORK/results/<suite>.jsonl; pytest runs are read from the junit files test.sh asks pytest for.
set -euo pipefail

TSI=$(cd "$(dirname "$0")/.." && pwd)
TRITON_SERVER=${TRITON_SERVER:-/tmp/triton-qa/server}
TRITON_CLIENT=${TRITON_CLIENT:-/tmp/triton-qa/client}
TRITON_COMMON=${TRITON_COMMON:-/tmp/triton-qa/common}
TRITON_PYTHON_BACKEND=${TRITON_PYTHON_BACKEND:-/tmp/triton-qa/python_backend}
QA_WORK=${QA_WORK:-/tmp/tsi-qa}
QA_PYTHON=${QA_PYTHON:-/usr/bin/python3}
QA_TIMEOUT=${QA_TIMEOUT:-1200}
VERSION=tsi

usage() { sed -n '2,/^set -euo/p' "$0" | grep -v '^set -euo' | sed 's/^# \{0,1\}//'; }

setup() {
  [ -d "$TRITON_CLIENT/src/python/library/tritonclient" ] || { echo "no client checkout at $TRITON_CLIENT" >&2; exit 1; }
  [ -d "$TRITON_COMMON/protobuf" ] || { echo "no common checkout at $TRITON_COMMON" >&2; exit 1; }
  local lib=$QA_WORK/pylib
  rm -rf "$lib" && mkdir -p "$lib"
  local pkg
  for pkg in tritonclient tritonclientutils tritongrpcclient tritonhttpclient tritonshmutils; do
    [ -d "$TRITON_CLIENT/src/python/library/$pkg" ] && cp -r "$TRITON_CLIENT/src/python/library/$pkg" "$lib/"
  done
  # tritonclient's wheel build generates these from common's protos and renames grpc_service to service.
  local gen=$QA_WORK/proto-gen
  rm -rf "$gen" && mkdir -p "$gen"
  "$QA_PYTHON" -m grpc_tools.protoc -I "$TRITON_COMMON/protobuf" --python_out="$gen" --grpc_python_out="$gen" \
    "$TRITON_COMMON/protobuf/grpc_service.proto" "$TRITON_COMMON/protobuf/model_config.proto" \
    "$TRITON_COMMON/protobuf/health.proto"
  local g=$lib/tritonclient/grpc
  sed -E 's/^import ([^ ]*)_pb2 as ([^ ]*)$/from tritonclient.grpc import \1_pb2 as \2/' \
    "$gen/model_config_pb2.py" > "$g/model_config_pb2.py"
  sed -E 's/^import ([^ ]*)_pb2 as ([^ ]*)$/from tritonclient.grpc import \1_pb2 as \2/' \
    "$gen/grpc_service_pb2.py" > "$g/service_pb2.py"
  sed -E 's/^import grpc_([^ ]*)_pb2 as ([^ ]*)$/from tritonclient.grpc import \1_pb2 as \2/' \
    "$gen/grpc_service_pb2_grpc.py" > "$g/service_pb2_grpc.py"
  cp "$gen/health_pb2.py" "$gen/health_pb2_grpc.py" "$g/" 2>/dev/null || true

  # qa's test_util imports ml_dtypes (for BF16), which Debian does not package: a wheel of it, unpacked.
  if ! "$QA_PYTHON" -c "import ml_dtypes" 2>/dev/null; then
    local whl
    whl=$(ls "${QA_WHEELS:-/opt/pypi/files}"/ml_dtypes-0.5*-cp3*manylinux*x86_64*.whl 2>/dev/null | head -n 1)
    [ -n "$whl" ] || { echo "ml_dtypes is missing: set QA_WHEELS to a folder with its wheel" >&2; exit 1; }
    "$QA_PYTHON" -m zipfile -e "$whl" "$lib"
  fi
  # psutil (test_util's RSS checks): Debian's python3-psutil, else a wheel of it.
  if ! "$QA_PYTHON" -c "import psutil" 2>/dev/null; then
    local pwhl
    pwhl=$(ls "${QA_WHEELS:-/opt/pypi/files}"/psutil-*-abi3-manylinux*x86_64*.whl 2>/dev/null | head -n 1)
    if [ -n "$pwhl" ]; then "$QA_PYTHON" -m zipfile -e "$pwhl" "$lib"; else echo "psutil is missing (apt-get install python3-psutil): suites that read the server's RSS fail"; fi
  fi

  # sseclient-py (PyPI only; L0_http, L0_sagemaker and L0_iterative_sequence import it): where the python
  # lacks it, a stand-in of ours for what qa uses, SSEClient(response).events() with .data, and _read().
  if ! "$QA_PYTHON" -c "import sseclient" 2>/dev/null; then
    cat > "$lib/sseclient.py" <<'EOF'
"""Stand-in for sseclient-py written for tsi's qa harness: server-sent events from an iterable of bytes."""


class Event:
    def __init__(self, data="", event="message", id=None, retry=None):
        self.data, self.event, self.id, self.retry = data, event, id, retry


class SSEClient:
    def __init__(self, event_source, char_enc="utf-8"):
        self._source, self._enc = event_source, char_enc

    def _lines(self):
        buf = b""
        for chunk in self._source:
            buf += chunk
            while True:
                cut = [i for i in (buf.find(b"\r\n"), buf.find(b"\n"), buf.find(b"\r")) if i >= 0]
                if not cut:
                    break
                i = min(cut)
                if i == len(buf) - 1 and buf[i:] == b"\r":
                    break  # a CR LF may be split across chunks
                yield buf[:i].decode(self._enc)
                buf = buf[i + (2 if buf[i:i + 2] == b"\r\n" else 1):]
        if buf:
            yield buf.decode(self._enc).rstrip("\r")
        yield ""

    def _read(self):
        # Whole events as the server framed them (qa checks each is "data: ...\n\n").
        event = b""
        for chunk in self._source:
            for line in chunk.splitlines(True):
                event += line
                if event.endswith((b"\r\r", b"\n\n", b"\r\n\r\n")):
                    yield event
                    event = b""
        if event:
            yield event

    def events(self):
        data, fields = [], {}
        for line in self._lines():
            if line == "":
                if data:
                    yield Event("\n".join(data), fields.get("event", "message"), fields.get("id"), fields.get("retry"))
                data, fields = [], {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data":
                    data.append(value)
                else:
                    fields[name] = value

    def close(self):
        close = getattr(self._source, "close", None)
        if close:
            close()
EOF
  fi
  # `python`/`python3` in test.sh and qa's scripts: the python with the packages above.
  mkdir -p "$QA_WORK/bin"
  ln -sf "$QA_PYTHON" "$QA_WORK/bin/python"
  ln -sf "$QA_PYTHON" "$QA_WORK/bin/python3"

  # Some test.sh install what they need as they go (pip install torch, apt sources for cmake, git clone):
  # in Triton's throwaway test image that is fine, on a user's machine it is not. These stand in front.
  # pip says so and succeeds, so that a `set -e` suite goes on to its other tests (those that import
  # what was not installed fail, and are counted); the others fail as a missing tool would.
  local tool
  for tool in pip pip3 apt apt-get git wget; do
    local rc=1
    case $tool in pip|pip3) rc=0 ;; esac
    printf '#!/bin/sh\necho "triton-qa.sh: %s $* refused: suites may not change this machine" >&2\nexit %s\n' "$tool" "$rc" > "$QA_WORK/bin/$tool"
    chmod +x "$QA_WORK/bin/$tool"
  done

  # Where a suite starts tritonserver, tsi starts: node through a link named tritonserver, so that the
  # process is called that (suites find their server with `ps | grep tritonserver`).
  local opt=$QA_WORK/opt/tritonserver
  mkdir -p "$opt/bin" "$opt/backends" "$opt/lib"
  ln -sf "$(command -v node)" "$opt/lib/tritonserver"
  cat > "$opt/bin/tritonserver" <<EOF
#!/usr/bin/env bash
exec "$opt/lib/tritonserver" "$TSI/bin/tsi-node.js" serve "\$@"
EOF
  chmod +x "$opt/bin/tritonserver"
  # perf_analyzer (Triton's C++ client tool; suites drive load with it, e.g. L0_passive_instance): tsi's
  # own, which takes its flags, where none is installed.
  if ! command -v perf_analyzer >/dev/null; then
    printf '#!/bin/sh\nexec node "%s/bin/tsi-node.js" perf "$@"\n' "$TSI" > "$QA_WORK/bin/perf_analyzer"
    chmod +x "$QA_WORK/bin/perf_analyzer"
  fi
  # SageMaker's entry script (on PATH as `serve` in Triton's image), with its /opt/ml readdressed.
  if [ -f "$TRITON_SERVER/docker/sagemaker/serve" ]; then
    cp "$TRITON_SERVER/docker/sagemaker/serve" "$QA_WORK/bin/serve"
    readdress "$QA_WORK/bin/serve"
    chmod +x "$QA_WORK/bin/serve"
  fi

  # Records each unittest run of a suite (TextTestRunner is what unittest.main uses).
  cat > "$lib/sitecustomize.py" <<'EOF'
import json, os, sys, unittest

_out = os.environ.get("TSI_QA_RESULTS")
if _out:
    _run = unittest.TextTestRunner.run

    def _record(self, test):
        result = _run(self, test)
        row = {
            "argv": " ".join(sys.argv),
            "cwd": os.getcwd(),
            "run": result.testsRun,
            "failures": [t.id() for t, _ in result.failures],
            "errors": [t.id() for t, _ in result.errors],
            "skipped": [t.id() for t, _ in result.skipped],
        }
        with open(_out, "a") as f:
            f.write(json.dumps(row) + "\n")
        return result

    unittest.TextTestRunner.run = _record
EOF
  "$QA_PYTHON" -c "import sys; sys.path.insert(0, '$lib'); import tritonclient.grpc, tritonclient.http; print('tritonclient ready')"
}

models() {
  local src=$TRITON_SERVER/qa/common data=$QA_WORK/data/$VERSION
  mkdir -p "$data"
  gen() { # repo-name script args...
    local dir=$data/$1 log=$QA_WORK/logs/models-${1//\//-}.log; shift
    if [ -d "$dir" ]; then echo "have $dir"; return; fi
    echo "generating $dir"
    mkdir -p "$dir" "$QA_WORK/logs"
    (cd "$src" && PYTHONPATH=$QA_WORK/pylib "$QA_PYTHON" "$@" --models_dir="$dir") > "$log" 2>&1 ||
      { echo "  failed: see $log"; rm -rf "$dir"; }
  }
  # The ONNX half of qa/common/gen_qa_model_repository, call for call.
  local o="--onnx --onnx_opset=0"
  gen qa_model_repository gen_qa_models.py $o
  gen qa_variable_model_repository gen_qa_models.py $o --variable
  gen qa_identity_model_repository gen_qa_identity_models.py $o
  gen qa_reshape_model_repository gen_qa_reshape_models.py $o --variable
  gen qa_sequence_model_repository gen_qa_sequence_models.py $o
  gen qa_variable_sequence_model_repository gen_qa_sequence_models.py $o --variable
  gen qa_sequence_initial_state_implicit_model_repository gen_qa_implicit_models.py $o --initial-state zero
  gen qa_variable_sequence_initial_state_implicit_model_repository gen_qa_implicit_models.py $o --initial-state zero --variable
  gen qa_sequence_implicit_model_repository gen_qa_implicit_models.py $o
  gen qa_variable_sequence_implicit_model_repository gen_qa_implicit_models.py $o --variable
  gen qa_dyna_sequence_model_repository gen_qa_dyna_sequence_models.py $o
  gen qa_dyna_sequence_implicit_model_repository gen_qa_dyna_sequence_implicit_models.py $o
  gen qa_ragged_model_repository gen_qa_ragged_models.py $o
  gen qa_scalar_models gen_qa_ort_scalar_models.py --onnx_opset=0
  # Ensembles over the models above, each kind in its own folder as Triton's script writes them.
  gen qa_ensemble_model_repository/qa_model_repository gen_qa_models.py --ensemble
  gen qa_ensemble_model_repository/qa_variable_model_repository gen_qa_models.py --ensemble --variable
  gen qa_ensemble_model_repository/qa_reshape_model_repository gen_qa_reshape_models.py --ensemble
  gen qa_ensemble_model_repository/qa_identity_model_repository gen_qa_identity_models.py --ensemble
  gen qa_ensemble_model_repository/qa_sequence_model_repository gen_qa_sequence_models.py --ensemble
  gen qa_ensemble_model_repository/qa_variable_sequence_model_repository gen_qa_sequence_models.py --ensemble --variable
  # The generators write ensembles for every platform; those over models only TensorRT, libtorch,
  # TensorFlow or OpenVINO make have no steps here (Triton's image has them), so they go.
  local cfg
  for cfg in $(grep -lE 'model_name: "(libtorch|plan|graphdef|savedmodel|openvino)_' "$data"/qa_ensemble_model_repository/*/*/config.pbtxt 2>/dev/null || true); do
    rm -rf "$(dirname "$cfg")"
  done
}

# Counts of one suite from its results file and junit reports: "suite run passed failed".
count() {
  local suite=$1
  "$QA_PYTHON" - "$QA_WORK/results/$suite.jsonl" "$QA_WORK/qa/$suite" "$suite" <<'EOF'
import glob, json, os, sys
import xml.etree.ElementTree as ET
path, folder, suite = sys.argv[1:4]
run = bad = 0
failed = []
if os.path.exists(path):
    for line in open(path):
        r = json.loads(line)
        run += r["run"] - len(r["skipped"])
        bad += len(r["failures"]) + len(r["errors"])
        failed += r["failures"] + r["errors"]
for xml in glob.glob(os.path.join(folder, "**", "*.xml"), recursive=True):
    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError:
        continue
    for case in root.iter("testcase"):
        if case.find("skipped") is not None:
            continue
        run += 1
        if case.find("failure") is not None or case.find("error") is not None:
            bad += 1
            failed.append(case.get("classname", "") + "." + case.get("name", ""))
print(f"{suite:32s} run {run:4d}  passed {run - bad:4d}  failed {bad:4d}")
for f in failed:
    print(f"    {f}")
EOF
}

# Points a copied folder's /opt/tritonserver, /data/inferenceserver and /opt/ml (SageMaker's model
# folders) at QA_WORK's, and scripts run as `#!/usr/bin/python` (Triton's image has one) at PATH's python3.
readdress() {
  local f
  for f in $(grep -rlE '/opt/tritonserver|/data/inferenceserver|/opt/ml|^#!/usr/bin/python' "$1" 2>/dev/null || true); do
    sed -i -e "s#/opt/tritonserver#$QA_WORK/opt/tritonserver#g" -e "s#/data/inferenceserver#$QA_WORK/data#g" \
      -e "s#/opt/ml\\([/ \"]\\|\$\\)#$QA_WORK/opt/ml\\1#g" -e "1s@^#!/usr/bin/python3\\?\$@#!/usr/bin/env python3@" "$f"
  done
}

# One of the quick start's models (docs/examples/model_repository/NAME) into DEST: Triton's config as it
# is, with the weights tsi generates for its own default repository (Triton fetches them from a URL).
example_model() {
  local name=$1 dest=$2
  mkdir -p "$dest"
  cp -r "$TRITON_SERVER/docs/examples/model_repository/$name" "$dest/"
  mkdir -p "$dest/$name/1"
  cp "$TSI/models/$name/1/"* "$dest/$name/1/"
}

# What Triton's test image (Dockerfile.QA) adds to a suite's folder before it runs.
prepare() {
  local suite=$1 d=$QA_WORK/qa/$1 m
  case $suite in
    L0_https|L0_secure_grpc|L0_simple_nodejs_client|L0_data_compression|L0_simple_example|L0_shared_memory)
      example_model simple "$d/models" ;;
    L0_http|L0_grpc)
      for m in simple simple_dyna_sequence simple_identity simple_sequence simple_string; do
        example_model "$m" "$d/models"
      done
      [ "$suite" = L0_grpc ] && example_model simple_int8 "$d/models" ;;
    L0_simple_ensemble)
      mkdir -p "$d/models/simple/1" "$d/models/simple/2"
      cp "$TSI/models/simple/1/model.onnx" "$d/models/simple/1/"
      cp "$TSI/models/simple/1/model.onnx" "$d/models/simple/2/" ;;
    L0_backend_identity)
      mkdir -p "$d/models"
      cp -r "$TRITON_SERVER/src/test/models/identity_fp32" "$d/models/"
      mkdir -p "$d/models/identity_fp32/1" ;;
    L0_sagemaker)
      # /opt/ml (readdressed) as a fresh image has it: not there.
      rm -rf "$QA_WORK/opt/ml" ;;
    L0_dyna_sequence_batcher)
      # Triton's image has libtriton_dyna_sequence.so in the version folder; tsi builds the backend in.
      mkdir -p "$QA_WORK/qa/custom_models/custom_dyna_sequence_int32/1" ;;
    L0_iterative_sequence)
      # As for dyna_sequence: the image's version folder holds libtriton_iterative_sequence.so.
      mkdir -p "$d/models/iterative_sequence/1" ;;
    L0_sequence_stress|L0_rate_limiter)
      # The same for libtriton_sequence.so (tsi's built-in `sequence` backend).
      mkdir -p "$QA_WORK/qa/custom_models/custom_sequence_int32/1" ;;
    L0_grpc_state_cleanup)
      mkdir -p "$d/models"
      cp -r "$TRITON_SERVER/src/test/models/repeat_int32" "$d/models/"
      mkdir -p "$d/models/repeat_int32/1" ;;
    L0_decoupled)
      # repeat_int32 and square_int32 beside the suite's ensembles (tsi builds both backends in).
      cp -r "$TRITON_SERVER/src/test/models/repeat_int32" "$TRITON_SERVER/src/test/models/square_int32" "$d/models/"
      for m in "$d"/models/*/; do mkdir -p "$m/1"; done
      # fan_repeat's last step is a libtorch model: the ensemble goes, its trial in each test, and the
      # copy of that model into each trial's repository (which, failing under set -e, ends the suite).
      rm -rf "$d/models/fan_repeat"
      sed -i '/("fan_repeat", self._fan_validate),/d' "$d/decoupled_test.py"
      sed -i '/libtorch_nobatch_int32_int32_int32/,/config.pbtxt)/d' "$d/test.sh"
      # Its "python" trial: the same models with repeat_int32 and square_int32 as python_backend's examples.
      local ex=$TRITON_PYTHON_BACKEND/examples/decoupled
      if [ -f "$ex/repeat_model.py" ]; then
        cp -r "$d/models" "$d/python_models"
        cp "$ex/repeat_model.py" "$d/python_models/repeat_int32/1/model.py"
        cp "$ex/repeat_config.pbtxt" "$d/python_models/repeat_int32/config.pbtxt"
        cp "$ex/square_model.py" "$d/python_models/square_int32/1/model.py"
        cp "$ex/square_config.pbtxt" "$d/python_models/square_int32/config.pbtxt"
      else
        echo "   no python_backend checkout at $TRITON_PYTHON_BACKEND: L0_decoupled's python trial is skipped"
        sed -i 's/^TRIALS="python custom"/TRIALS="custom"/' "$d/test.sh"
      fi ;;
  esac
  return 0
}

# Suites with nothing tsi could pass: every test needs what tsi does not have. Listed (with the reason)
# rather than run; QA_ALL=1 runs them anyway.
not_tsis() {
  case $1 in
    L0_priority) echo "greps the log for TensorRT plan models' CUDA stream priority" ;;
    L0_output_validation) echo "libtorch models only (libtorch_model_store2)" ;;
    L0_output_name) echo "a libtorch model's output names (libtorch_nobatch_zero_1_float32)" ;;
    L0_query) echo "Triton's C++ 'query' test backend and a C API test program" ;;
    L0_json|L0_backend_output_detail) echo "a C++ unit test program of Triton's (triton_json_test, backend_output_detail_test)" ;;
    L0_io) echo "pip-installs torch (cu130) and runs Triton's C API memory_alloc program" ;;
    L0_backend_bls) echo "adds an apt source and builds Triton's C++ BLS example backend from its repository" ;;
    L0_simple_nodejs_client) echo "git-clones Triton's common repository at test time" ;;
    L0_http_fuzz) echo "needs boofuzz (PyPI only)" ;;
    L0_https) echo "installs its certificates into /etc/nginx: nginx in front of the server, the client's TLS tested" ;;
    *) return 1 ;;
  esac
}

run_suite() {
  local suite=$1 src=$TRITON_SERVER/qa/$1 why
  [ -d "$src" ] || { echo "$suite: not in $TRITON_SERVER/qa"; return; }
  if [ -z "${QA_ALL:-}" ] && why=$(not_tsis "$suite"); then
    echo "== $suite: not run, not tsi's: $why"
    return
  fi
  mkdir -p "$QA_WORK/qa" "$QA_WORK/results" "$QA_WORK/logs"
  # A fresh copy of the suite and of qa/common, with only the addresses changed.
  rm -rf "$QA_WORK/qa/$suite" "$QA_WORK/qa/common"
  cp -r "$src" "$QA_WORK/qa/$suite"
  cp -r "$TRITON_SERVER/qa/common" "$QA_WORK/qa/common"
  readdress "$QA_WORK/qa/$suite"
  readdress "$QA_WORK/qa/common"
  # Folders of qa/ that the suite's test.sh reaches into (../L0_x/..., ../python_models/...), addressed too.
  local other
  # Triton's image also has qa/ at /opt/tritonserver/qa (PYTHON_MODELS_DIR's default in some suites).
  ln -sfn "$QA_WORK/qa" "$QA_WORK/opt/tritonserver/qa"
  for other in $(grep -ohE '(\.\./|/opt/tritonserver/qa/)(L0_[A-Za-z_0-9]+|[a-z_]+_models)' "$src/test.sh" | sed 's#^.*/##' | sort -u || true); do
    if [ ! -d "$QA_WORK/qa/$other" ] && [ -d "$TRITON_SERVER/qa/$other" ]; then
      cp -r "$TRITON_SERVER/qa/$other" "$QA_WORK/qa/$other"
      readdress "$QA_WORK/qa/$other"
      # What the image adds to it, as to the suite itself.
      if [ "$other" = L0_decoupled ]; then prepare L0_decoupled; fi
    fi
  done
  prepare "$suite"
  # ../clients: in Triton's test image, the client repository's python examples.
  if [ ! -d "$QA_WORK/qa/clients" ]; then
    mkdir -p "$QA_WORK/qa/clients"
    cp "$TRITON_CLIENT"/src/python/examples/*.py "$QA_WORK/qa/clients/"
  fi
  rm -f "$QA_WORK/results/$suite.jsonl"
  # Suites use tritonserver's fixed ports: a server left over from elsewhere makes every start fail.
  local port
  for port in 8000 8001 8002; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "== $suite: not run: port $port is taken (a server still running?)"
      return
    fi
  done
  local log=$QA_WORK/logs/$suite.log start=$SECONDS rc=0
  echo "== $suite (log: $log)"
  (
    # Through /opt/tritonserver/qa, as Triton's image runs its suites: `pwd` is what a suite's models are told.
    cd "$QA_WORK/opt/tritonserver/qa/$suite"
    export PATH=$QA_WORK/bin:$QA_WORK/opt/tritonserver/bin:$PATH
    export PYTHONPATH=$QA_WORK/pylib:$QA_WORK/qa/common${PYTHONPATH:+:$PYTHONPATH}
    export TSI_QA_RESULTS=$QA_WORK/results/$suite.jsonl
    export NVIDIA_TRITON_SERVER_VERSION=$VERSION TRITON_SERVER_CPU_ONLY=1
    # Triton's image also sets TRITON_SERVER_VERSION, the version its server reports (L0_lifecycle compares).
    TRITON_SERVER_VERSION=$(node --input-type=module -e "console.log((await import('$TSI/dist/core/server.js')).TSI_VERSION)")
    export TRITON_SERVER_VERSION
    export TRITON_DIR=$QA_WORK/opt/tritonserver TRITON_QA_ROOT_DIR=$QA_WORK/qa
    export BACKENDS=${BACKENDS:-onnx}
    # Where SageMaker multi-model loads may point, now that /opt/ml is readdressed.
    export TSI_SAGEMAKER_MODELS_ROOT=$QA_WORK/opt/ml/models
    exec setsid bash test.sh "$VERSION"
  ) > "$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if (( SECONDS - start > QA_TIMEOUT )); then
      echo "   timed out after ${QA_TIMEOUT}s"
      kill -- "-$pid" 2>/dev/null || true
      break
    fi
    sleep 2
  done
  wait "$pid" || rc=$?
  # A failing test.sh can leave its server running: end what is left of the suite's process group.
  kill -- "-$pid" 2>/dev/null || true
  echo "   test.sh exit $rc after $(( SECONDS - start ))s"
  count "$suite"
}

case ${1:-} in
  setup) setup ;;
  models) models ;;
  run) shift; for s in "$@"; do run_suite "$s"; done ;;
  report) for f in "$QA_WORK"/results/*.jsonl; do count "$(basename "$f" .jsonl)"; done ;;
  *) usage; exit 2 ;;
esac
