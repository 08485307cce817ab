/**
 * A local stand-in for the Hugging Face Hub, on a real HTTP server (port 0), answering the routes
 * `@huggingface/hub` calls the way huggingface.co does: model info (`/api/models/<id>/revision/<rev>`,
 * with `sha`), the tree listing (`/api/models/<id>/tree/<rev>?recursive=`, paged with a `Link` header),
 * and files (`/<id>/resolve/<rev>/<path>`): small files straight from git with their blob oid as ETag,
 * LFS files (the ONNX weights) as a 302 to a CDN path with `X-Linked-ETag`/`X-Linked-Size`, all with
 * `X-Repo-Commit` and Range requests answered 206 with `Content-Range`. A private repo wants
 * `Authorization: Bearer <token>`. `cutOnce` ends one download of a file half-way, to test resuming.
 */

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, relative } from 'node:path';

export interface HubRepo {
  files: Map<string, Uint8Array>;
  sha: string;
  token?: string;
}

export interface FakeHub {
  url: string;
  /** Every request: method, path (no query) and Range header. */
  log: { path: string; range?: string }[];
  /** The next full-body download of this repo path stops half-way (the socket is destroyed). */
  cutOnce?: string;
  add(id: string, dir: string, token?: string): HubRepo;
  close(): Promise<void>;
}

const PAGE = 5;
const isLfs = (path: string) => /\.onnx(_data(_\d+)?)?$/.test(path);
const gitOid = (b: Uint8Array) => createHash('sha1').update(`blob ${b.length}\0`).update(b).digest('hex');
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

function walk(dir: string, root = dir, out = new Map<string, Uint8Array>()): Map<string, Uint8Array> {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) walk(p, root, out);
    else out.set(relative(root, p), readFileSync(p));
  }
  return out;
}

export async function startFakeHub(): Promise<FakeHub> {
  const repos = new Map<string, HubRepo>();
  const blobs = new Map<string, { data: Uint8Array; repo: HubRepo; path: string }>();
  let server: Server;

  const json = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', ...headers }).end(JSON.stringify(body));
  };
  const notFound = (res: ServerResponse, code: string, error: string) => json(res, 404, { error }, { 'x-error-code': code });

  /** The body, whole or the asked range, as the Hub and its CDN send it. */
  const send = (req: IncomingMessage, res: ServerResponse, data: Uint8Array, headers: Record<string, string>, cutPath?: string) => {
    const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    let start = 0, end = data.length - 1, status = 200;
    if (m) {
      start = Number(m[1]);
      end = m[2] ? Math.min(Number(m[2]), data.length - 1) : data.length - 1;
      if (start >= data.length) return void res.writeHead(416, { 'content-range': `bytes */${data.length}` }).end();
      status = 206;
      headers['content-range'] = `bytes ${start}-${end}/${data.length}`;
    }
    const body = data.subarray(start, end + 1);
    res.writeHead(status, { ...headers, 'accept-ranges': 'bytes', 'content-length': String(body.length), 'content-type': 'application/octet-stream' });
    if (cutPath && hub.cutOnce === cutPath && body.length > 1) {
      hub.cutOnce = undefined;
      // Half the bytes, time for the client to take them, then the connection drops.
      res.write(body.subarray(0, body.length >> 1), () => setTimeout(() => res.destroy(), 300));
      return;
    }
    res.end(body);
  };

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', hub.url);
    hub.log.push({ path: decodeURIComponent(url.pathname), range: req.headers.range });
    const cdn = /^\/cdn\/([0-9a-f]{64})$/.exec(url.pathname);
    if (cdn) {
      const b = blobs.get(cdn[1]!);
      if (!b) return notFound(res, 'EntryNotFound', 'Entry not found');
      return send(req, res, b.data, { etag: `"${cdn[1]}"` }, b.path);
    }
    const api = /^\/api\/models\/([^/]+\/[^/]+)\/(revision|tree)\/([^/]+)(?:\/(.*))?$/.exec(url.pathname);
    const file = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(url.pathname);
    const id = decodeURIComponent((api ?? file)?.[1] ?? '');
    const repo = repos.get(id);
    const rev = decodeURIComponent((api ? api[3] : file?.[2]) ?? '');
    if (!repo || (repo.token && req.headers.authorization !== `Bearer ${repo.token}`)) {
      return json(res, 401, { error: 'Repository not found' }, { 'x-error-code': 'RepoNotFound' });
    }
    if (rev !== 'main' && rev !== 'HEAD' && rev !== repo.sha) return notFound(res, 'RevisionNotFound', `Invalid rev id: ${rev}`);
    const commit = { 'x-repo-commit': repo.sha };
    if (api?.[2] === 'revision') {
      return json(res, 200, { _id: createHash('md5').update(id).digest('hex').slice(0, 24), id, sha: repo.sha, private: !!repo.token, gated: false, pipeline_tag: 'text-generation', downloads: 0, likes: 0, lastModified: '2026-01-01T00:00:00.000Z' });
    }
    if (api) {
      const under = api[4] ? `${decodeURIComponent(api[4])}/` : '';
      const recursive = url.searchParams.get('recursive') === 'true';
      const entries: unknown[] = [];
      const dirs = new Set<string>();
      for (const [path, data] of [...repo.files].sort(([a], [b]) => a.localeCompare(b))) {
        if (!path.startsWith(under)) continue;
        const rest = path.slice(under.length).split('/');
        if (rest.length > 1 && !dirs.has(under + rest[0])) {
          dirs.add(under + rest[0]);
          entries.push({ type: 'directory', oid: gitOid(Buffer.from(rest[0]!)), size: 0, path: under + rest[0] });
        }
        if (rest.length > 1 && !recursive) continue;
        const lfs = isLfs(path) ? { lfs: { oid: sha256(data), size: data.length, pointerSize: 134 } } : {};
        entries.push({ type: 'file', oid: gitOid(data), size: data.length, path, ...lfs });
      }
      const cursor = Number(url.searchParams.get('cursor') ?? 0);
      const next = new URL(url);
      next.searchParams.set('cursor', String(cursor + PAGE));
      return json(res, 200, entries.slice(cursor, cursor + PAGE), cursor + PAGE < entries.length ? { link: `<${next}>; rel="next"` } : {});
    }
    if (file) {
      const path = decodeURIComponent(file[3]!);
      const data = repo.files.get(path);
      if (!data) return notFound(res, 'EntryNotFound', `Entry not found: ${path}`);
      if (isLfs(path)) {
        const oid = sha256(data);
        res.writeHead(302, { ...commit, location: `/cdn/${oid}`, 'x-linked-etag': `"${oid}"`, 'x-linked-size': String(data.length), etag: `"${gitOid(data)}"` }).end();
        return;
      }
      return send(req, res, data, { ...commit, etag: `"${gitOid(data)}"` });
    }
    notFound(res, 'EntryNotFound', 'Not found');
  };

  const hub: FakeHub = {
    url: '',
    log: [],
    add(id, dir, token) {
      const files = walk(dir);
      const sha = createHash('sha1').update(id).update(String(files.size)).digest('hex');
      const repo = { files, sha, token };
      repos.set(id, repo);
      for (const [path, data] of files) if (isLfs(path)) blobs.set(sha256(data), { data, repo, path });
      return repo;
    },
    close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
  server = createServer(handle);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  hub.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return hub;
}
