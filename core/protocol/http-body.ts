/**
 * The one reader of HTTP request bodies, for every route (infer, generate, the OpenAI API, repository
 * and model control, shared memory, logging, trace), in Node and in the page alike. A body is bounded
 * by --http-max-input-size three ways, each before the bytes are kept: a declared Content-Length over
 * the limit is refused unread; a body without one (chunked) is counted as it arrives and cut off at the
 * limit; a gzip/deflate body is decoded as a stream and cut off when the decoded size passes the limit,
 * so a small "gzip bomb" never expands in memory. Triton's texts (http_server.cc, data_compressor.h),
 * whichever bound was crossed: its decompression one for a gzip/deflate body, its raw-input one for a
 * raw binary infer body, its JSON-size one for every other.
 *
 * Decoding uses the Web-standard DecompressionStream, so this file stays platform-neutral.
 */

import { TsiError, invalidArg } from '../errors.js';
import { concatBytes } from '../tensor.js';

/**
 * Where the raw body comes from: a Web stream (a Request's body), or a transport's own reader that
 * returns the whole body and rejects with `tooLarge` as soon as more than `limit` bytes have arrived
 * (the Node server's infer shortcut, which places binary tensor data on an 8-byte boundary as it joins).
 */
export type BodySource = ReadableStream<Uint8Array> | null | ((limit: number, kind: BodyKind) => Promise<Uint8Array>);

export interface BodyOptions {
  /**
   * Content codings the route decodes. Triton's generate endpoints take only `identity` and say so
   * with their own text; every other route takes gzip and deflate too.
   */
  identityOnly?: string;
  /**
   * The route takes no binary tensor data (Triton's generate endpoints): Inference-Header-Content-Length
   * is not looked at, and the whole body is JSON bounded by the limit, as Triton reads it.
   */
  jsonOnly?: boolean;
}

/**
 * Which text a body over its limit gets: true for a raw binary infer body, false for a JSON one,
 * 'decompressed' for a gzip/deflate one, 'binary' for binary tensor data after a JSON header.
 */
export type BodyKind = boolean | 'decompressed' | 'binary';

/**
 * Triton's text for a body over the limit: a gzip/deflate body is bounded as it is decoded
 * (DataCompressor::DecompressData, before the body is looked at), a raw binary infer body
 * (`Inference-Header-Content-Length: 0`, EVBufferToRawInput) has its own, any other body is the JSON
 * one (EVBufferToJson).
 */
export function tooLarge(size: number, max: number, raw: BodyKind = false): TsiError {
  if (raw === 'binary') {
    return invalidArg(`request body of ${size} bytes exceeds the largest binary request of ${max} bytes that can be held in one buffer; send larger tensors through shared memory`);
  }
  if (raw === 'decompressed') {
    return invalidArg(`Decompressed data size exceeds the maximum allowed value of ${max} bytes. Use --http-max-input-size to increase the limit.`);
  }
  if (raw) {
    return invalidArg(`Raw input has a byte_size (${size} bytes) that exceeds the maximum allowed value of ${max} bytes. Use --http-max-input-size to increase the limit.`);
  }
  return invalidArg(`request JSON size of ${size} bytes exceeds the maximum allowed input size of ${max} bytes. Use --http-max-input-size to increase the limit.`);
}

/**
 * The largest body with binary tensor data that is read: one buffer's worth (Node's Buffer and V8's
 * typed arrays stop at 4 GiB).
 */
export const MAX_BINARY_BODY = 2 ** 32 - 1;

/** A JSON header length (Inference-Header-Content-Length) greater than 0, when one is given. */
function binaryHeaderLength(value: string | null | undefined): number | undefined {
  const n = value == null || !/^\s*\d+\s*$/.test(value) ? NaN : Number(value);
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** Whether a request's headers make its body raw binary tensor data (a header length of 0). */
export const isRawBody = (headerLength: string | null | undefined): boolean => headerLength?.trim() === '0';

/** Reads, checks and (if Content-Encoding says so) decodes a request body within `maxInput` bytes. */
export async function readRequestBody(
  header: (name: string) => string | null | undefined, source: BodySource, maxInput: number, opts: BodyOptions = {},
): Promise<Uint8Array> {
  const enc = (header('Content-Encoding') ?? 'identity').trim().toLowerCase();
  if (enc !== 'identity' && enc !== '') {
    if (opts.identityOnly !== undefined) throw invalidArg(opts.identityOnly);
    if (enc !== 'gzip' && enc !== 'deflate') throw new TsiError('UNSUPPORTED', 'Unsupported compression type');
  }
  const encoded = enc === 'gzip' || enc === 'deflate';
  const headerLength = opts.jsonOnly ? undefined : header('Inference-Header-Content-Length');
  const rawBody: BodyKind = encoded ? 'decompressed' : isRawBody(headerLength);
  // Binary tensor data after a JSON header is not bounded by the limit, as in Triton, whose
  // EVBufferToJson applies it to the header alone: the tensors are bounded by the model's shapes
  // (checked once the header is read) and here only by what one buffer can hold.
  const jsonLength = encoded || rawBody ? undefined : binaryHeaderLength(headerLength);
  const limit = jsonLength === undefined ? maxInput : MAX_BINARY_BODY;
  const declared = Number(header('Content-Length') ?? NaN);
  // A header longer than the body is the decoder's to refuse, with its own text, as in Triton,
  // which checks the header's range before its size.
  const headerTooLarge = (length: number) => jsonLength !== undefined && jsonLength > maxInput && jsonLength <= length;
  if (headerTooLarge(declared)) {
    await cancel(source);
    throw tooLarge(jsonLength!, maxInput);
  }
  if (declared > limit) {
    await cancel(source);
    throw tooLarge(declared, limit, jsonLength === undefined ? rawBody : 'binary');
  }
  if (encoded) {
    const raw = typeof source === 'function' ? blobStream(await source(maxInput, rawBody)) : source ?? blobStream(new Uint8Array(0));
    return decode(raw, enc, maxInput);
  }
  const kind: BodyKind = jsonLength === undefined ? rawBody : 'binary';
  const body = typeof source === 'function' ? await source(limit, kind) : source ? await collect(source, limit, kind) : new Uint8Array(0);
  if (headerTooLarge(body.byteLength)) throw tooLarge(jsonLength!, maxInput);
  return body;
}

/** Reads a Web Request's body with readRequestBody. */
export function readWebBody(req: Request, maxInput: number, opts?: BodyOptions): Promise<Uint8Array> {
  return readRequestBody((n) => req.headers.get(n), req.body, maxInput, opts);
}

/** A body refused by its headers is not read: its stream is cancelled so a transport can drop the rest. */
async function cancel(source: BodySource): Promise<void> {
  if (source && typeof source !== 'function') await source.cancel().catch(() => {});
}

const blobStream = (data: Uint8Array) => new Blob([data as BlobPart]).stream() as ReadableStream<Uint8Array>;

/** The stream's bytes, joined; past `max` bytes the stream is cancelled and the body refused. */
async function collect(stream: ReadableStream<Uint8Array>, max: number, rawBody: BodyKind, onChunkError?: (err: unknown) => never): Promise<Uint8Array> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > max) {
        chunks.length = 0;
        await reader.cancel().catch(() => {});
        throw tooLarge(total, max, rawBody);
      }
      chunks.push(value);
    }
  } catch (err) {
    if (err instanceof TsiError || !onChunkError) throw err;
    onChunkError(err);
  } finally {
    reader.releaseLock();
  }
  return chunks.length === 0 ? new Uint8Array(0) : concatBytes(chunks);
}

/** Decodes while reading, so the limit applies to the decoded bytes before they are kept. */
async function decode(raw: ReadableStream<Uint8Array>, format: 'gzip' | 'deflate', max: number): Promise<Uint8Array> {
  // The compressed bytes count too: a body over the limit before decoding is refused as one that is
  // over it after (Triton reads the whole compressed body into a buffer bounded the same way).
  let rawTotal = 0;
  const counted = raw.pipeThrough(new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      rawTotal += chunk.byteLength;
      if (rawTotal > max) throw tooLarge(rawTotal, max, 'decompressed');
      controller.enqueue(chunk);
    },
  }));
  const decoded = counted.pipeThrough(new DecompressionStream(format) as unknown as ReadableWritablePair<Uint8Array, Uint8Array>);
  return collect(decoded, max, 'decompressed', (err) => {
    if (err instanceof TsiError) throw err;
    throw invalidArg(`failed to decompress the ${format} request body: ${(err as Error).message}`);
  });
}
