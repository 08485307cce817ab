/**
 * The onnxruntime backend's pool of worker threads (worker.ts). Every model instance is a session
 * hosted by one of them, not a thread of its own: measured before the pool, each instance cost a
 * worker thread (its own V8 isolate and onnxruntime binding, about 10 MB) and an intra-op thread, so
 * 200 copies of a 250-byte model took 2 GB and 424 threads.
 *
 * A thread runs one session's batch at a time, so placement keeps Triton's meaning of
 * `instance_group.count` (that many executions of the model at once): a model's instances go to
 * threads that host none of its other instances, the least busy first; the pool starts threads up
 * to its size (a core each by default), and beyond it only when a model asks for more instances than
 * the pool has threads. A thread with no session left ends, so an idle server holds none.
 *
 * onnxruntime's environment is already one per process (the binding's `OrtEnv` is a singleton);
 * its thread pools are per session, and the Node binding cannot reach the global ones
 * (`CreateEnvWithGlobalThreadPools` and `DisablePerSessionThreads` are not exposed). Every CPU
 * session therefore gets a pool of its own, sized by its own config alone (intraOpThreads in
 * session-options.ts), never by what was loaded before it: a session opens on its calling thread and
 * widens to that pool once its runs prove heavy (worker.ts), so hundreds of tiny models add no
 * threads. What widened sessions hold beyond their calling threads is capped at `extraThreads` for
 * the process, the bound on OS threads; a closed session gives its share back. A config's
 * `intra_op_thread_count` is honoured as written, outside the cap.
 *
 * Concurrency: main thread only. Each session's messages are routed by its id; a thread that dies
 * fails every session it hosted.
 */

import type { Worker } from 'node:worker_threads';
import type { InitMessage, SessionReply, SessionRequest, WorkerReply, WorkerRequest } from './worker.js';
import { startWorker } from '../worker-url.js';

class PoolThread {
  readonly sessions = new Map<number, PooledSession>();
  /** Sessions per model key: a model's instances avoid sharing a thread. */
  readonly models = new Map<string, number>();
  dead?: Error;
  retiring = false;

  constructor(readonly worker: Worker, readonly index: number) {}

  hosts(model: string): boolean {
    return (this.models.get(model) ?? 0) > 0;
  }
}

/** One session in a pool thread, as its instance sees it. */
export class PooledSession {
  /** Replies for this session (results, errors); set by the instance. */
  onReply: (m: SessionReply) => void = () => {};
  /** Called once if the thread dies under the session. */
  onFail: (e: Error) => void = () => {};
  private closing?: () => void;

  constructor(
    private readonly pool: OrtPool, private readonly thread: PoolThread, readonly sid: number,
    readonly model: string, public threads: number,
  ) {}

  /** Intra-op threads this session took from the pool's cap (given back when it closes). */
  widenedBy = 0;

  /** The pool thread's number, for logs and tests. */
  get threadIndex(): number {
    return this.thread.index;
  }

  /** Whether other sessions share the thread (a batch may then wait behind theirs). */
  get shared(): boolean {
    return this.thread.sessions.size > 1;
  }

  post(msg: SessionRequest, transfer: ArrayBuffer[] = []): void {
    this.thread.worker.postMessage({ ...msg, sid: this.sid } satisfies WorkerRequest, transfer);
  }

  /** @internal the thread's router */
  deliver(m: SessionReply): void {
    if (m.kind === 'widened' && !m.refused) {
      this.widenedBy = m.threads - this.threads;
      this.threads = m.threads;
    }
    if (m.kind === 'closed') this.closing?.();
    else this.onReply(m);
  }

  /**
   * Closes the session after the batches posted before (`seq` continues the instance's order); the
   * thread ends with its last session. Past `timeoutMs` the session is dropped unanswered.
   */
  async close(seq: number, timeoutMs = 5000): Promise<void> {
    if (!this.thread.dead) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        this.closing = () => {
          clearTimeout(timer);
          resolve();
        };
        this.post({ kind: 'close', seq });
      });
    }
    await this.pool.release(this.thread, this);
  }
}

export interface PoolOptions {
  /** Threads started before a model's instances share one (default: one per core). */
  size: number;
  /** Intra-op threads widened sessions may hold beyond their calling threads, all together. */
  extraThreads: number;
}

export class OrtPool {
  private readonly threads: PoolThread[] = [];
  private nextSid = 1;
  private nextIndex = 0;
  /** Int32 [extra threads widened sessions hold, opts.extraThreads]: workers take, release gives back. */
  readonly threadBudget = new SharedArrayBuffer(8);

  constructor(readonly opts: PoolOptions) {
    Atomics.store(new Int32Array(this.threadBudget), 1, opts.extraThreads);
  }

  /**
   * Live threads, the sessions they host, and their intra-op threads: each session's count (its
   * calling thread included) summed, and what widened ones took from the cap.
   */
  stats(): { threads: number; sessions: number; intraOpThreads: number; widenedThreads: number } {
    let sessions = 0;
    let intraOpThreads = 0;
    for (const t of this.threads) {
      sessions += t.sessions.size;
      for (const s of t.sessions.values()) intraOpThreads += s.threads;
    }
    return { threads: this.threads.length, sessions, intraOpThreads, widenedThreads: Atomics.load(new Int32Array(this.threadBudget), 0) };
  }

  /**
   * Opens a session for an instance of `model` (name and version) on the thread that suits it;
   * resolves with the session and its ready message, rejects with the thread's reason it could not.
   * `threads`: the intra-op threads it opens with (`init.sessionOptions`).
   */
  async open(model: string, init: InitMessage, threads: number): Promise<{ session: PooledSession; ready: Extract<SessionReply, { kind: 'ready' }> }> {
    const thread = this.place(model);
    const session = new PooledSession(this, thread, this.nextSid++, model, threads);
    thread.sessions.set(session.sid, session);
    thread.models.set(model, (thread.models.get(model) ?? 0) + 1);
    const ready = await new Promise<Extract<SessionReply, { kind: 'ready' }>>((resolve, reject) => {
      session.onReply = (m) => {
        if (m.kind === 'ready') resolve(m);
        else reject(new Error(m.kind === 'init-error' ? m.message : `unexpected reply '${m.kind}'`));
      };
      session.onFail = reject;
      thread.worker.postMessage({ kind: 'open', sid: session.sid, init } satisfies WorkerRequest);
    }).catch(async (err: Error) => {
      await this.release(thread, session);
      throw err;
    });
    session.onReply = () => {};
    session.onFail = () => {};
    return { session, ready };
  }

  private place(model: string): PoolThread {
    let best: PoolThread | undefined;
    for (const t of this.threads) {
      if (t.retiring || t.hosts(model)) continue;
      if (!best || t.sessions.size < best.sessions.size) best = t;
    }
    if (best && (best.sessions.size === 0 || this.threads.length >= this.opts.size)) return best;
    return this.spawn();
  }

  private spawn(): PoolThread {
    const worker = startWorker('onnx/worker', undefined);
    const thread = new PoolThread(worker, this.nextIndex++);
    this.threads.push(thread);
    worker.on('message', (m: WorkerReply) => thread.sessions.get(m.sid)?.deliver(m));
    const die = (e: Error) => {
      if (thread.dead) return;
      thread.dead = e;
      this.drop(thread);
      for (const s of thread.sessions.values()) s.onFail(e);
    };
    worker.on('error', die);
    worker.on('exit', (code) => die(new Error(`worker exited with code ${code}`)));
    return thread;
  }

  private drop(thread: PoolThread): void {
    const i = this.threads.indexOf(thread);
    if (i >= 0) this.threads.splice(i, 1);
  }

  /** @internal a session is gone: its threads return to the budget, and an empty thread ends. */
  async release(thread: PoolThread, session: PooledSession): Promise<void> {
    if (!thread.sessions.delete(session.sid)) return;
    if (session.widenedBy > 0) Atomics.sub(new Int32Array(this.threadBudget), 0, session.widenedBy);
    const left = (thread.models.get(session.model) ?? 1) - 1;
    if (left > 0) thread.models.set(session.model, left);
    else thread.models.delete(session.model);
    if (thread.sessions.size > 0 || thread.dead || thread.retiring) return;
    thread.retiring = true;
    this.drop(thread);
    const exited = new Promise<void>((r) => thread.worker.once('exit', () => r()));
    thread.worker.postMessage({ kind: 'exit' } satisfies WorkerRequest);
    const timer = setTimeout(() => void thread.worker.terminate(), 5000);
    await exited;
    clearTimeout(timer);
  }
}
