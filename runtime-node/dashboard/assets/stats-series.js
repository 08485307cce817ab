/**
 * From two readings of the statistics API to one point per chart, pure (no DOM): requests/s, queue and
 * compute time per request, rows per execution and failures/s over the interval between the readings.
 * Counters only grow while a model version stays loaded; a reload starts them again, so a reading lower
 * than the one before is taken as a fresh start instead of a negative rate.
 */

/** `model:version` → that version's statistics, from `GET /v2/models/stats`. */
export function byKey(body) {
  const out = new Map();
  for (const s of body.model_stats ?? []) out.set(`${s.name}:${s.version}`, s);
  return out;
}

const computeNs = (s) => s.inference_stats.compute_input.ns + s.inference_stats.compute_infer.ns + s.inference_stats.compute_output.ns;

/**
 * The interval's point for one model version: `prev` and `cur` are its statistics `dtMs` apart.
 * Averages over an interval with nothing in it are null (a gap in the line, not a zero).
 */
export function point(prev, cur, dtMs) {
  const p = prev && cur.execution_count >= prev.execution_count && cur.inference_stats.success.count >= prev.inference_stats.success.count ? prev : undefined;
  const d = (f) => f(cur) - (p ? f(p) : 0);
  const ok = d((s) => s.inference_stats.success.count);
  const failed = d((s) => s.inference_stats.fail.count);
  const queued = d((s) => s.inference_stats.queue.count);
  const computed = d((s) => s.inference_stats.compute_infer.count);
  const executions = d((s) => s.execution_count);
  const sec = Math.max(dtMs, 1) / 1000;
  return {
    rps: p ? (ok + failed) / sec : null,
    queueMs: queued > 0 ? d((s) => s.inference_stats.queue.ns) / queued / 1e6 : null,
    computeMs: computed > 0 ? d(computeNs) / computed / 1e6 : null,
    batch: executions > 0 ? d((s) => s.inference_count) / executions : null,
    failps: p ? failed / sec : null,
  };
}

/** The totals row of one model version, from its statistics since load. */
export function totals(s) {
  const st = s.inference_stats;
  return {
    requests: st.success.count,
    failures: st.fail.count,
    inferences: s.inference_count,
    executions: s.execution_count,
    avgBatch: s.execution_count > 0 ? s.inference_count / s.execution_count : 0,
    avgQueueUs: st.queue.count > 0 ? st.queue.ns / st.queue.count / 1e3 : 0,
    avgComputeUs: st.compute_infer.count > 0 ? computeNs(s) / st.compute_infer.count / 1e3 : 0,
  };
}
