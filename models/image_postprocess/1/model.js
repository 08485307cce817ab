// image_postprocess: logits -> the most likely label and its softmax probability, per image.
// Labels are read once, in initialize(), through args.readText (a file of this model's folder).
export default class ImagePostprocess {
  async initialize(args) {
    this.labels = (await args.readText('labels.txt')).split('\n').map((l) => l.trim()).filter(Boolean);
  }

  execute(requests) {
    return requests.map((request) => {
      const scores = request.input('scores');
      const classes = scores.shape[1];
      const labels = [];
      const probability = new Float32Array(request.batchSize);
      for (let b = 0; b < request.batchSize; b++) {
        const row = scores.data.subarray(b * classes, (b + 1) * classes);
        let best = 0;
        for (let i = 1; i < classes; i++) if (row[i] > row[best]) best = i;
        let sum = 0;
        for (let i = 0; i < classes; i++) sum += Math.exp(row[i] - row[best]);
        labels.push(this.labels[best] ?? String(best));
        probability[b] = 1 / sum;
      }
      return { outputs: { LABEL: labels, PROBABILITY: probability } };
    });
  }
}
