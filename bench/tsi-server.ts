/**
 * Side (c) of the batching bench: the tsi server (runtime-node's `startServer`, the same code as
 * `tsi-node serve`) over one model repository, as a child process of bench/batching.ts:
 *   node --import tsx bench/tsi-server.ts <repository>  → prints "PORT <n>" once models are ready
 */

import { startServer } from '../runtime-node/index.js';

const [repo] = process.argv.slice(2);
const running = await startServer({ modelRepositories: [repo!], httpPort: 0, httpAddress: '127.0.0.1', logVerbose: 0 });
process.stdout.write(`PORT ${running.http!.port}\n`);
process.on('SIGTERM', () => void running.stop(5000).then(() => process.exit(0)));
