// custom_identity_int32: Triton's "identity" test backend in JavaScript. Every OUTPUT<i> the config
// lists is a copy of the request's INPUT<i> (same datatype and shape), after waiting the model's
// `execute_delay_ms` parameter, if set, once per execution.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export default class Identity {
  initialize(args) {
    const config = args.model_config;
    this.delayMs = Number(config.parameters?.execute_delay_ms?.string_value ?? 0) || 0;
    this.pairs = (config.output ?? [])
      .filter((o) => o.name.startsWith('OUTPUT'))
      .map((o) => [o.name, `INPUT${o.name.slice('OUTPUT'.length)}`]);
  }

  async execute(requests) {
    if (this.delayMs > 0) await sleep(this.delayMs);
    return requests.map((request) => {
      const outputs = {};
      for (const [output, inputName] of this.pairs) {
        const input = request.input(inputName);
        if (input) outputs[output] = { data: input.bytes ?? input.data, shape: input.shape, datatype: input.datatype };
      }
      return { outputs };
    });
  }
}
