/**
 * The servers the client tests talk to: the real tsi server over the default repository (HTTP and
 * gRPC listeners, client shared memory allowed) plus a small decoupled model, and a second one in
 * explicit model-control mode for load/unload. `repeat` is a JavaScript backend registered through
 * startServer's extraBackends: for input IN = [n] it sends n responses OUT = [0], [1], ..., [n-1] and
 * then a bare completion flag — the shape of a streaming (decoupled) model, which ONNX cannot express.
 * `echo_request` answers with the priority, timeout and parameters its request arrived with.
 */

import type { Backend, BackendRequest } from '../../core/index.js';
import { ECHO_REQUEST_FILES, echoRequestBackend } from '../helpers/echo-request.js';
import { MODELS, startTestServer, tempRepo, type TestServer } from '../helpers/server.js';

const REPEAT_CONFIG = `
name: "repeat"
backend: "repeat_js"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { count: 1, kind: KIND_CPU } ]
`;

/** Answers each request with IN[0] responses spaced 2 ms apart, then a completion-only final one. */
export function repeatBackend(): Backend {
  return {
    name: 'repeat_js',
    async loadModel() {
      return {
        async createInstance(spec) {
          return {
            spec, device: 'cpu',
            async execute(requests: BackendRequest[]) {
              await Promise.all(requests.map(async (r) => {
                const n = (r.inputs.get('IN')!.data as Int32Array)[0]!;
                for (let i = 0; i < n; i++) {
                  r.send({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data: new Int32Array([i]) }] }, false);
                  await new Promise((res) => setTimeout(res, 2));
                }
                r.send({ outputs: [] }, true);
              }));
            },
            async unload() {},
          };
        },
        async unload() {},
      };
    },
  };
}

export interface ClientServers {
  main: TestServer;
  explicit: TestServer;
  grpcUrl: string;
  explicitGrpcUrl: string;
  stop(): Promise<void>;
}

export async function startClientServers(): Promise<ClientServers> {
  const extra = tempRepo({ 'repeat/config.pbtxt': REPEAT_CONFIG, 'repeat/1/.keep': '', ...ECHO_REQUEST_FILES });
  const [main, explicit] = await Promise.all([
    startTestServer({
      modelRepositories: [MODELS, extra.path], grpcPort: 0, grpcAddress: '127.0.0.1', allowClientShm: true,
      extraBackends: { repeat_js: repeatBackend, echo_request_js: echoRequestBackend },
      // The clients' response decompression needs compressed answers of any size (Triton's way).
      httpCompression: { mode: 'always', minBytes: 0 },
    }),
    startTestServer({ modelRepositories: [MODELS], modelControlMode: 'explicit', loadModels: ['simple'], grpcPort: 0, grpcAddress: '127.0.0.1' }),
  ]);
  return {
    main, explicit,
    grpcUrl: `127.0.0.1:${main.grpc!.port}`,
    explicitGrpcUrl: `127.0.0.1:${explicit.grpc!.port}`,
    async stop() {
      await Promise.all([main.stop(5000), explicit.stop(5000)]);
      extra.cleanup();
    },
  };
}
