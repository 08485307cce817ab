// Development-only worker bootstrap (see worker-url.ts): registers tsx, then loads the TypeScript
// worker entry named in workerData.
import { register } from 'tsx/esm/api';
import { workerData } from 'node:worker_threads';

register();
await import(workerData.entry);
