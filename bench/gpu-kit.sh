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
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KIT="$ROOT/.gpu-kit"

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

case "${1:-}" in
  make) make_kit ;;
  run) run_kit ;;
  *) echo "usage: sh bench/gpu-kit.sh make|run" >&2; exit 2 ;;
esac
