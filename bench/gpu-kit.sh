#!/bin/sh
# The GPU benches on a lent GPU machine (docs/gpu.md, "Benchmarks on a lent GPU machine"), which has
# Python with torch and transformers but no Node, no npm and no network.
#   sh bench/gpu-kit.sh make   here (Linux x64, with npm): .gpu-kit/ gets Node, the compiled server with
#                              its production dependencies (onnxruntime-node's linux-x64 binaries only),
#                              the two benches bundled by esbuild, and the Vulkan loader's .debs (< 64 MiB)
#   sh bench/gpu-kit.sh run    there, with .gpu-kit carried: unpacks it, points Vulkan at the NVIDIA
#                              driver's EGL ICD, runs `tsi-node doctor`, bench:llm-gpu (big_gpt, 1/8/32
#                              streams, 32 tokens) and bench:gpu, each with --markdown, and leaves their
#                              output and the rewritten docs/performance.md in $OUT (default .gpu-kit/out)
#   sh bench/gpu-kit.sh run-cuda   there, in a second call right after `run` (the warm machine keeps .gpu-kit),
#                              with .gpu-kit-cuda carried: onnxruntime 1.29.0's core and CUDA provider (only the
#                              sm_90 device code, for H100/H200: bench/fatbin-keep.py; ~50 MB, so not in the
#                              first call's 64 MiB), doctor, ResNet-50 exported by PyTorch on CPU, WebGPU and CUDA
#                              beside PyTorch (section gpu-resnet50-cuda), big_gpt on KIND_CPU and CUDA
#                              (section llm-gpu-cuda)
#   sh bench/gpu-kit.sh dry-run    here, without a GPU: make (when not made), then both runs' steps with tiny
#                              sizes into .gpu-kit/out-dry: unpacking, the CUDA environment, doctor and every
#                              bench's launcher on what this machine has (CUDA falls back: no device)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIT="$ROOT/.gpu-kit"
CUDA_KIT="$ROOT/.gpu-kit-cuda"
SM=90

make_kit() {
  cd "$ROOT"
  rm -rf "$KIT/stage" && mkdir -p "$KIT/stage/tsi/bench" "$KIT/stage/tsi/docs" "$KIT/stage/tsi/models/tiny_gpt/1" "$KIT/debs"
  npx tsc -p tsconfig.build.json
  S="$KIT/stage/tsi"
  cp -r dist "$S/dist" && rm -rf "$S/dist/browser" "$S/dist/test"
  node -e 'const p=require("./package.json"); console.log(JSON.stringify({ name: p.name, version: p.version, type: p.type }))' > "$S/package.json"
  cp models/tiny_gpt/config.pbtxt "$S/models/tiny_gpt/" && cp models/tiny_gpt/1/*.json "$S/models/tiny_gpt/1/"
  cp docs/performance.md "$S/docs/" && cp bench/torch_peer.py "$S/bench/"
  # The benches bundled (their own imports resolved now); onnxruntime-node and webgpu load from node_modules
  # there. Each runs through a one-line launcher named as the bench (--markdown names its section so),
  # so no bundled module's "am I the main script" check mistakes the bundle for itself.
  npx esbuild bench/llm-gpu.ts bench/gpu.ts --bundle --platform=node --format=esm --outdir="$S/bench" --entry-names='[name].bundle' \
    --out-extension:.js=.mjs --external:onnxruntime-node --external:webgpu --log-level=warning \
    --banner:js="import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);"
  for b in llm-gpu gpu; do echo "import './$b.bundle.mjs';" > "$S/bench/$b.mjs"; done
  # The CUDA call's sections (bench/markdown.ts names a section after the launcher).
  echo "import './gpu.bundle.mjs';" > "$S/bench/gpu-resnet50-cuda.mjs"
  echo "import './llm-gpu.bundle.mjs';" > "$S/bench/llm-gpu-cuda.mjs"
  # Production dependencies, as npm would install them, with only linux-x64 native binaries.
  for p in $(npm ls --omit=dev --parseable --all 2>/dev/null | grep node_modules | sed 's#.*/node_modules/##' | sort -u); do
    mkdir -p "$S/node_modules/$(dirname "$p")" && cp -r "node_modules/$p" "$S/node_modules/$p"
  done
  find "$S/node_modules/onnxruntime-node/bin/napi-v6" -mindepth 1 -maxdepth 1 ! -name linux -exec rm -rf {} +
  rm -rf "$S/node_modules/onnxruntime-node/bin/napi-v6/linux/arm64"
  if [ -d node_modules/webgpu ]; then
    cp -r node_modules/webgpu "$S/node_modules/webgpu"
    find "$S/node_modules/webgpu/dist" -mindepth 1 -maxdepth 1 -type d ! -name linux-x64 -exec rm -rf {} +
  fi
  tar -C "$KIT/stage" -cJf "$KIT/tsi.tar.xz" tsi
  xz -c "$(command -v node)" > "$KIT/node.xz"
  (cd "$KIT/debs" && apt-get download libvulkan1 libegl1 libglvnd0 libgl1 libglx0 libopengl0 libgles2 >/dev/null)
  rm -rf "$KIT/stage"
  du -sh "$KIT"
  make_cuda_kit
}

# The CUDA provider for the second call: installed by tsi itself (pinned hashes checked) into a cache of
# the kit's own, its device code cut to sm_$SM, packed with the matching core.
make_cuda_kit() {
  cd "$ROOT"
  CACHE="$ROOT/.gpu-kit-cache"
  if [ ! -f "$CACHE/cuda/onnxruntime-node-1.29.0/tsi-cuda-install.json" ]; then
    node -e "import('./dist/runtime-node/cli.js').then((m) => m.main(['node', 'tsi-node', 'gpu', 'install', 'cuda', '--cache-dir', '$CACHE']))"
  fi
  rm -rf "$CUDA_KIT" && mkdir -p "$CUDA_KIT/stage/cuda"
  cp -r "$CACHE/cuda/onnxruntime-node-1.29.0" "$CUDA_KIT/stage/cuda/"
  X="$CUDA_KIT/stage/cuda/onnxruntime-node-1.29.0/bin/napi-v6/linux/x64"
  python3 bench/fatbin-keep.py "$CACHE/cuda/onnxruntime-node-1.29.0/bin/napi-v6/linux/x64/libonnxruntime_providers_cuda.so" "$X/libonnxruntime_providers_cuda.so" "$SM"
  tar -C "$CUDA_KIT/stage" -cf - cuda | xz -T0 -6 > "$CUDA_KIT/cuda.tar.xz"
  rm -rf "$CUDA_KIT/stage"
  du -sh "$CUDA_KIT"
}

run_kit() {
  OUT="${OUT:-$KIT/out}" && mkdir -p "$OUT"
  W=/tmp/tsi-kit && rm -rf "$W" && mkdir -p "$W"
  tar -C "$W" -xJf "$KIT/tsi.tar.xz" && xz -dc "$KIT/node.xz" > "$W/node" && chmod +x "$W/node"
  if ! ldconfig -p | grep -q libvulkan.so.1; then for f in "$KIT"/debs/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
  ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  # Headless: the driver's ICD names the GLX library, whose instance fails without a display; EGL's does not.
  if [ -f "$ICD" ]; then sed 's/libGLX_nvidia/libEGL_nvidia/' "$ICD" > "$W/nvidia_egl_icd.json" && export VK_DRIVER_FILES="$W/nvidia_egl_icd.json"; fi
  export XDG_RUNTIME_DIR=/tmp PATH="$W:$PATH"
  cd "$W/tsi"
  node -e "import('./dist/runtime-node/cli.js').then((m) => m.main(['node', 'tsi-node', 'doctor']))" > "$OUT/doctor.txt" 2>&1 || true
  node bench/llm-gpu.mjs --model big_gpt --streams 1,8,32 --tokens 32 --markdown > "$OUT/llm-gpu.txt" 2> "$OUT/llm-gpu.err" || echo "llm-gpu failed: see llm-gpu.err"
  node bench/gpu.mjs --rounds 2 --markdown > "$OUT/gpu.txt" 2> "$OUT/gpu.err" || echo "gpu failed: see gpu.err"
  cp docs/performance.md "$OUT/performance.md"
  tail -n 30 "$OUT/llm-gpu.txt" "$OUT/gpu.txt"
}

# Unpacks the first call's kit where a fresh machine (or a dry run) has not yet.
unpack_kit() {
  W=/tmp/tsi-kit
  if [ ! -x "$W/node" ] || [ ! -d "$W/tsi" ]; then
    rm -rf "$W" && mkdir -p "$W"
    tar -C "$W" -xJf "$KIT/tsi.tar.xz" && xz -dc "$KIT/node.xz" > "$W/node" && chmod +x "$W/node"
  fi
  if ! ldconfig -p | grep -q libvulkan.so.1; then for f in "$KIT"/debs/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
  ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  if [ -f "$ICD" ]; then sed 's/libGLX_nvidia/libEGL_nvidia/' "$ICD" > "$W/nvidia_egl_icd.json" && export VK_DRIVER_FILES="$W/nvidia_egl_icd.json"; fi
  export XDG_RUNTIME_DIR=/tmp PATH="$W:$PATH"
}

# The second call: everything on the CUDA provider's 1.29.0 core (CPU and WebGPU are in it too), with the
# environment `tsi-node serve` would re-execute itself with, set here for the benches' own raw sessions.
run_cuda() {
  OUT="${OUT:-$KIT/out}" && mkdir -p "$OUT"
  [ -f "$KIT/tsi.tar.xz" ] || { echo "run-cuda: .gpu-kit is not here: run 'sh bench/gpu-kit.sh run' first, in the call before, on the same warm machine" >&2; exit 2; }
  unpack_kit
  export TSI_CACHE_DIR=/tmp/tsi-kit/cache
  rm -rf "$TSI_CACHE_DIR" && mkdir -p "$TSI_CACHE_DIR" && xz -dc "$CUDA_KIT/cuda.tar.xz" | tar -C "$TSI_CACHE_DIR" -xf -
  cd "$W/tsi"
  node -e "import('./dist/runtime-node/cli.js').then((m) => m.main(['node', 'tsi-node', 'doctor']))" > "$OUT/doctor-cuda.txt" 2>&1 || true
  ENV=$(node --input-type=module -e "
    const m = await import('./dist/runtime-node/gpu/cuda-env.js');
    const p = m.serveCudaPlan();
    if (p.action !== 'reexec') { console.error('run-cuda: CUDA cannot load here: ' + (p.message ?? p.reason)); process.exit(1); }
    for (const k of ['LD_LIBRARY_PATH', 'TSI_ORT_DIR', 'TSI_CUDA_REEXEC']) console.log('export ' + k + '=' + JSON.stringify(p.env[k]));") || { [ -n "${DRY:-}" ] || exit 1; ENV=; }
  eval "$ENV"
  echo "CUDA environment: ${ENV:-none (dry run: the CUDA steps fall back)}" | tee "$OUT/cuda-env.txt"
  if [ -n "${DRY:-}" ]; then
    R50="--size 32 --width 8 --rounds 1 --duration 0.3 --concurrency 1,4"; LLM="--model mid_gpt --streams 1 --tokens 4 --requests 1 --no-torch"
  else
    R50="--size 224 --rounds 2"; LLM="--model big_gpt --streams 1,8,32 --tokens 32"
  fi
  ONNX=
  if python3 -c 'import torch, torchvision' 2>/dev/null; then
    python3 bench/torch_peer.py export --arch resnet50 --size "$( [ -n "${DRY:-}" ] && echo 32 || echo 224 )" --out "$W/resnet50.onnx" > "$OUT/resnet50-export.txt" 2>&1 && ONNX="--onnx $W/resnet50.onnx --arch resnet50"
  fi
  [ -n "$ONNX" ] || echo "no PyTorch here: ResNet-50 cannot be exported; the conv model stands in" | tee -a "$OUT/cuda-env.txt"
  # shellcheck disable=SC2086
  node bench/gpu-resnet50-cuda.mjs --eps cpu,webgpu,cuda $ONNX $R50 --markdown > "$OUT/gpu-resnet50-cuda.txt" 2> "$OUT/gpu-resnet50-cuda.err" || echo "gpu-resnet50-cuda failed: see gpu-resnet50-cuda.err"
  # Naming cuda makes its GPU copy fail to load where CUDA cannot (a dry run): there, the default order.
  ACC=; [ -n "$ENV" ] && ACC="--accelerator cuda"
  # shellcheck disable=SC2086
  node bench/llm-gpu-cuda.mjs $LLM $ACC --no-host-kv --markdown > "$OUT/llm-gpu-cuda.txt" 2> "$OUT/llm-gpu-cuda.err" || echo "llm-gpu-cuda failed: see llm-gpu-cuda.err"
  cp docs/performance.md "$OUT/performance.md"
  tail -n 30 "$OUT/gpu-resnet50-cuda.txt" "$OUT/llm-gpu-cuda.txt"
}

dry_run() {
  [ -f "$KIT/tsi.tar.xz" ] && [ -f "$CUDA_KIT/cuda.tar.xz" ] || make_kit
  rm -rf /tmp/tsi-kit
  OUT="$KIT/out-dry" DRY=1 run_cuda
}

case "${1:-}" in
  make) make_kit ;;
  run) run_kit ;;
  run-cuda) run_cuda ;;
  dry-run) dry_run ;;
  *) echo "usage: sh bench/gpu-kit.sh make|run|run-cuda|dry-run" >&2; exit 2 ;;
esac
