// simple_string_dyna_sequence: Triton's "dyna_sequence" test backend in JavaScript. Each instance
// keeps one int32 accumulator per correlation id, read from the CORRID control (a string holding an
// integer, or a number): when READY, START sets it to the sum of INPUT and later requests add INPUT;
// END adds the id, truncated to 32 bits, and forgets the sequence. OUTPUT has INPUT's shape, every
// element the accumulator. Each execution first waits the model's `execute_delay_ms` parameter.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const withCode = (code, message) => Object.assign(new Error(message), { code });

/** The correlation id as uint64, or undefined where a string does not start with an integer (C++ stoi). */
function correlationId(tensor) {
  const v = tensor.data[0];
  if (typeof v !== 'string') return BigInt.asUintN(64, BigInt(v));
  const m = /^\s*([+-]?\d+)/.exec(v);
  if (!m) return undefined;
  const n = BigInt(m[1]);
  return n < -(2n ** 31n) || n >= 2n ** 31n ? undefined : BigInt.asUintN(64, n);
}

export default class DynaSequence {
  initialize(args) {
    this.delayMs = Number(args.model_config.parameters?.execute_delay_ms?.string_value ?? 0) || 0;
    this.accumulators = new Map();
  }

  async execute(requests) {
    if (this.delayMs > 0) await sleep(this.delayMs);
    const seen = new Set();
    return requests.map((request) => {
      const corrid = correlationId(request.input('CORRID'));
      if (corrid === undefined) return { error: withCode('INVALID_ARG', 'dyna sequence backend expects correlation ID to be decodable into an integer') };
      // The sequence batcher must never put two requests of one sequence in a batch.
      if (seen.has(corrid)) return { error: withCode('UNSUPPORTED', 'Execute() called with batch containing multiple inferences requests for the same Correlation ID') };
      seen.add(corrid);
      const flag = (name) => request.input(name).data[0] !== 0;
      if (!flag('READY')) return { outputs: {} };
      const input = request.input('INPUT');
      let acc = flag('START') ? 0 : (this.accumulators.get(corrid) ?? 0);
      for (const v of input.data) acc = (acc + v) | 0;
      if (flag('END')) {
        acc = (acc + Number(BigInt.asIntN(32, corrid))) | 0;
        this.accumulators.delete(corrid);
      } else {
        this.accumulators.set(corrid, acc);
      }
      return { outputs: { OUTPUT: { data: new Int32Array(input.data.length).fill(acc), shape: input.shape } } };
    });
  }
}
