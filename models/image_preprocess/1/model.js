// image_preprocess: HWC uint8 pixels -> CHW float32 in [0, 1], for every image of every request.
// A tsi JavaScript model: a class with initialize(args), execute(requests) and finalize(), the shape
// of Triton's Python backend. It uses no Node API, so it runs unchanged in the browser runtime.
export default class ImagePreprocess {
  initialize(args) {
    const dims = args.model_config.input[0].dims;
    [this.h, this.w, this.c] = dims;
  }

  execute(requests) {
    const { h, w, c } = this;
    const plane = h * w;
    return requests.map((request) => {
      const pixels = request.input('IMAGE').data; // Uint8Array, batch x h x w x c
      const out = new Float32Array(pixels.length);
      for (let b = 0; b < request.batchSize; b++) {
        const base = b * plane * c;
        for (let y = 0; y < h; y++) {
          for (let x = 0; x < w; x++) {
            for (let ch = 0; ch < c; ch++) out[base + ch * plane + y * w + x] = pixels[base + (y * w + x) * c + ch] / 255;
          }
        }
      }
      // Shape and datatype come from the config: [batch, 3, 16, 16], FP32.
      return { outputs: { image: out } };
    });
  }
}
