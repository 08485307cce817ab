// simple_identity: OUTPUT0 = INPUT0, byte for byte. Triton's example is a Python model; a JavaScript
// one is its counterpart here, and it hands back each element's raw bytes (`.bytes`), so NUL and
// non-UTF-8 bytes survive. (An ONNX Identity over strings could not: onnxruntime-node passes string
// elements as C strings and cuts them at the first NUL.)
export default class SimpleIdentity {
  execute(requests) {
    return requests.map((request) => {
      const input = request.input('INPUT0');
      return { outputs: { OUTPUT0: { data: input.bytes, shape: input.shape } } };
    });
  }
}
