// repeat_int32: Triton's "repeat" example backend in JavaScript, a decoupled model. For each request
// it starts a stream that, for every element i of IN, waits DELAY[i] ms and sends OUT = [IN[i]],
// IDX = [i], then closes the request. execute() itself returns after WAIT ms, which is how long the
// instance stays busy; streams outlive it, so responses of several requests may interleave.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const invalidArg = (message) => Object.assign(new Error(message), { code: 'INVALID_ARG' });

export default class Repeat {
  initialize() {
    this.streams = new Set();
  }

  async execute(requests) {
    let wait = 0;
    for (const request of requests) {
      const sender = request.responseSender();
      const input = request.input('IN');
      const delay = request.input('DELAY');
      wait = request.input('WAIT').data[0] ?? 0;
      if (input.shape.join() !== delay.shape.join()) {
        sender.send(invalidArg(`expected IN and DELAY shape to match, got [${input.shape.join(',')}] and [${delay.shape.join(',')}]`), true);
        continue;
      }
      // Copies: the request's buffers are not the stream's to keep.
      const stream = this.stream(sender, Int32Array.from(input.data), Uint32Array.from(delay.data));
      this.streams.add(stream);
      void stream.finally(() => this.streams.delete(stream));
    }
    await sleep(wait);
  }

  async stream(sender, values, delays) {
    try {
      for (let i = 0; i < values.length; i++) {
        await sleep(delays[i]);
        sender.send({ outputs: { OUT: { data: Int32Array.of(values[i]), shape: [1] }, IDX: { data: Uint32Array.of(i), shape: [1] } } });
      }
      sender.send(null, true);
    } catch (err) {
      sender.send(err, true);
    }
  }

  // Like Triton's backend, unloading waits for the streams still running.
  async finalize() {
    await Promise.allSettled([...this.streams]);
  }
}
