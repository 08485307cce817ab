/**
 * A real OTLP/HTTP trace receiver for the tests: an HTTP server on port 0 that takes POSTs to
 * /v1/traces and decodes each protobuf ExportTraceServiceRequest with the official OpenTelemetry
 * .proto schema (Debian's `opentelemetry-proto` package installs it under /usr/include, and
 * .ci/run installs that package). Spans come out flattened, ids in hex, attributes and events by
 * name, each with its batch's resource attributes. `hold()` makes it a slow collector that never
 * answers; `answered`/`posts` let a test wait on what the receiver reports instead of on a clock.
 */

import { existsSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import protobuf from 'protobufjs';

const PROTO_ROOT = '/usr/include';
const SERVICE_PROTO = 'opentelemetry/proto/collector/trace/v1/trace_service.proto';

/** Why the receiver cannot run here, or undefined when it can. */
export const otlpProtoMissing = existsSync(`${PROTO_ROOT}/${SERVICE_PROTO}`)
  ? undefined
  : `${PROTO_ROOT}/${SERVICE_PROTO} not found (Debian package opentelemetry-proto)`;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, string | number | boolean>;
  events: { name: string; timeUnixNano: bigint }[];
  status: { code: number; message: string };
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  resource: Record<string, string | number | boolean>;
}

export interface OtlpReceiver {
  url: string;
  spans: ReceivedSpan[];
  /** POSTs that arrived (answered or held). */
  posts: number;
  /** Stop answering: later POSTs hang until `release()` (a slow collector). */
  hold(): void;
  release(): void;
  close(): Promise<void>;
}

type Obj = Record<string, any>;

function value(v: Obj | undefined): string | number | boolean {
  if (!v) return '';
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return JSON.stringify(v);
}

const attrs = (list: Obj[] | undefined) => Object.fromEntries((list ?? []).map((a) => [a.key, value(a.value)]));
const hex = (b: Uint8Array | undefined) => Buffer.from(b ?? []).toString('hex');

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const root = new protobuf.Root();
  root.resolvePath = (_origin, target) => (target.startsWith('/') ? target : `${PROTO_ROOT}/${target}`);
  await root.load(SERVICE_PROTO, { keepCase: false });
  const Request = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
  const Response = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse');
  const held: ServerResponse[] = [];
  let holding = false;
  const out: OtlpReceiver = {
    url: '',
    spans: [],
    posts: 0,
    hold: () => void (holding = true),
    release: () => {
      holding = false;
      for (const r of held.splice(0)) r.destroy();
    },
    close: () => new Promise<void>((resolve) => {
      out.release();
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      out.posts++;
      if (holding) {
        held.push(res);
        return;
      }
      if (req.url !== '/v1/traces' || req.headers['content-type'] !== 'application/x-protobuf') {
        res.writeHead(415).end();
        return;
      }
      const msg = Request.toObject(Request.decode(Buffer.concat(chunks)), { longs: BigInt as any, bytes: Uint8Array as any, defaults: true }) as Obj;
      for (const rs of msg.resourceSpans ?? []) {
        const resource = attrs(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            out.spans.push({
              traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId), name: s.name, kind: s.kind,
              attributes: attrs(s.attributes),
              events: (s.events ?? []).map((e: Obj) => ({ name: e.name, timeUnixNano: BigInt(e.timeUnixNano) })),
              status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
              startTimeUnixNano: BigInt(s.startTimeUnixNano), endTimeUnixNano: BigInt(s.endTimeUnixNano), resource,
            });
          }
        }
      }
      res.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end(Response.encode(Response.create({})).finish());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address() as { port: number };
  out.url = `http://127.0.0.1:${addr.port}/v1/traces`;
  return out;
}

/** The spans of one trace as a tree of names: each span's name → its children's names, sorted. */
export function spanTree(spans: readonly ReceivedSpan[]): Record<string, string[]> {
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const tree: Record<string, string[]> = {};
  for (const s of spans) {
    const parent = byId.get(s.parentSpanId);
    if (parent) (tree[parent.name] ??= []).push(s.name);
  }
  for (const k of Object.keys(tree)) tree[k]!.sort();
  return tree;
}
