/**
 * `tsi-node perf`, a perf_analyzer for any KServe v2 server built on tsi's own client: cli.ts parses
 * perf_analyzer's flags, data.ts builds the inputs a model wants, load.ts keeps a concurrency or a
 * request rate, wire.ts pre-encodes requests for the lean load path, measure.ts runs the measurement
 * windows until they agree, report.ts prints the table, CSV and JSON.
 */

export * from './measure.js';
export * from './cli.js';
