/**
 * A model that answers with what reached it of its request beside the inputs: the priority, the
 * timeout (µs) and the custom parameters, so a test sees that a client's options arrived as sent and
 * not only that an answer came. A backend of its own (registered through startServer's
 * extraBackends), since a JavaScript or Python model is not shown the priority.
 */

import type { Backend, BackendRequest } from '../../core/index.js';

export const ECHO_REQUEST_CONFIG = `
name: "echo_request"
backend: "echo_request_js"
max_batch_size: 0
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [
  { name: "PRIORITY", data_type: TYPE_UINT64, dims: [ 1 ] },
  { name: "TIMEOUT_US", data_type: TYPE_UINT64, dims: [ 1 ] },
  { name: "PARAMETERS", data_type: TYPE_STRING, dims: [ 1 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
`;

/** The echo_request model's files, for a tempRepo. */
export const ECHO_REQUEST_FILES = { 'echo_request/config.pbtxt': ECHO_REQUEST_CONFIG, 'echo_request/1/.keep': '' };

/** What the core hands a backend carries the request's priority and timeout beside the declared fields. */
type Echoed = BackendRequest & { priority?: number; timeoutUs?: number };

export function echoRequestBackend(): Backend {
  return {
    name: 'echo_request_js',
    async loadModel() {
      return {
        async createInstance(spec) {
          return {
            spec, device: 'cpu',
            async execute(requests: BackendRequest[]) {
              for (const r of requests as Echoed[]) {
                // Parameters as JSON; 64-bit integers (gRPC's int64_param) as numbers.
                const params = JSON.stringify(r.parameters, (_k, v) => (typeof v === 'bigint' ? Number(v) : v));
                r.send({
                  outputs: [
                    { name: 'PRIORITY', datatype: 'UINT64', shape: [1], data: BigUint64Array.of(BigInt(r.priority ?? -1)) },
                    { name: 'TIMEOUT_US', datatype: 'UINT64', shape: [1], data: BigUint64Array.of(BigInt(r.timeoutUs ?? -1)) },
                    { name: 'PARAMETERS', datatype: 'BYTES', shape: [1], data: [new TextEncoder().encode(params)] },
                  ],
                }, true);
              }
            },
            async unload() {},
          };
        },
        async unload() {},
      };
    },
  };
}
