// token_streamer: a decoupled model. execute() returns nothing; each request's response sender
// carries any number of responses and then the final flag. Requests are handled concurrently
// (execute does not wait for a stream to end), so one slow stream does not hold up the next.
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export default class TokenStreamer {
  execute(requests) {
    for (const request of requests) void this.stream(request);
  }

  async stream(request) {
    const sender = request.responseSender();
    try {
      const text = request.input('text_input').data[0];
      const delay = Number(request.parameters.delay_ms ?? 0);
      const max = Number(request.parameters.max_tokens ?? Infinity);
      const tokens = text.split(/\s+/).filter(Boolean).slice(0, max);
      for (const token of tokens) {
        if (delay > 0) await sleep(delay);
        sender.send({ outputs: { text_output: [token] } });
      }
      sender.send(null, true);
    } catch (err) {
      sender.send(err, true);
    }
  }
}
