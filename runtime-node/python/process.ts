/**
 * One Python stub process: spawning it (never blocking the event loop), its shared memory, the
 * handshake, its stdout/stderr as log lines, and its end. The process is started as
 * `python -u tsi_python_stub.py <mode> <model> <instance>` with the control socket at fd 3 and, to
 * serve, the two shared-memory files at fds 4 and 5 (shm.ts). What it says after the handshake goes
 * to `onMessage`; how it ended goes to `onExit`, worded for the error the in-flight requests get.
 *
 * Ownership: a StubProcess owns its child, channel and shared-memory fds, and closes the fds once
 * the child has exited. The stub exits on its own when the channel closes, so dropping a
 * StubProcess (or tsi dying) never leaves a Python process behind.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Duplex, Readable } from 'node:stream';
import { finished } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { TsiError, type Logger } from '../../core/index.js';
import { Channel, type StubMessage } from './channel.js';
import { InputRegion, OutputRing, createShmFile } from './shm.js';

/** The stub script, beside this file both in the sources and in dist/ (the build copies it). */
export const STUB_PATH = fileURLToPath(new URL('./stub/tsi_python_stub.py', import.meta.url));
const STUB_DIR = dirname(STUB_PATH);

export interface StubOptions {
  python: string;
  env: NodeJS.ProcessEnv;
  model: string;
  instance: string;
  log: Logger;
  /** How long the interpreter may take to start (stub-timeout-seconds). */
  startTimeoutMs: number;
  /** Shared memory sizes (shm-default-byte-size, shm-growth-byte-size); absent: no shared memory. */
  shm?: { initial: number; growth: number };
}

const TAIL_LINES = 60;
/** Triton's python backend launches no stub whose name holds one of these (pb_utils.h INVALID_CHARS). */
const INVALID_STUB_CHARS = /[;|&$`<>()[\]{}\\"'*?~#!]/;

export class StubProcess {
  readonly child: ChildProcess;
  readonly input?: InputRegion;
  readonly ring?: OutputRing;
  private readonly channel: Channel;
  private readonly stderrTail: string[] = [];
  private readonly fds: number[] = [];
  private exitInfo?: { code: number | null; signal: NodeJS.Signals | null };
  private readonly exited: Promise<void>;
  private waiting?: { kinds: Set<string>; resolve: (m: StubMessage) => void };
  onMessage: (m: StubMessage) => void = () => {};
  onBatchEnd: () => void = () => {};
  onExit: (reason: string) => void = () => {};

  constructor(private readonly opts: StubOptions, private readonly mode: 'serve' | 'autocomplete') {
    // Triton's check and text, before anything is opened: auto-complete's stub is named after the
    // model, an instance's after the instance.
    const stubName = mode === 'autocomplete' ? opts.model : opts.instance;
    if (stubName === '' || INVALID_STUB_CHARS.test(stubName)) throw new TsiError('INVALID_ARG', 'Invalid stub name: contains invalid characters');
    const stdio: (string | number)[] = ['ignore', 'pipe', 'pipe', 'pipe'];
    if (opts.shm) {
      const a = createShmFile(opts.shm.initial, 'in');
      this.fds.push(a);
      const b = createShmFile(opts.shm.initial, 'out');
      this.fds.push(b);
      this.input = new InputRegion(a, opts.shm.initial, opts.shm.growth);
      this.ring = new OutputRing(b, this.input);
      stdio.push(a, b);
    }
    try {
      this.child = spawn(opts.python, ['-u', STUB_PATH, mode, opts.model, opts.instance], {
        stdio: stdio as ('pipe' | 'ignore' | number)[], env: opts.env,
      });
    } catch (err) {
      for (const fd of this.fds.splice(0)) closeSync(fd);
      throw err;
    }
    this.channel = new Channel(this.child.stdio[3] as Duplex, (m) => this.receive(m), () => this.onBatchEnd(), (err) => {
      this.stderrTail.push(`tsi: broken control message: ${err.message}`);
      opts.log.error(`${this.tag}: broken control channel (${err.message}); ending the process`);
      this.kill();
    });
    this.pipeLines(this.child.stdout!, (line) => opts.log.info(`${this.tag}: ${line}`));
    this.pipeLines(this.child.stderr!, (line) => {
      this.stderrTail.push(line);
      if (this.stderrTail.length > TAIL_LINES) this.stderrTail.shift();
      opts.log.warn(`${this.tag} (stderr): ${line}`);
    });
    this.exited = new Promise<void>((resolve) => {
      const done = (code: number | null, signal: NodeJS.Signals | null) => {
        if (this.exitInfo) return;
        this.exitInfo = { code, signal };
        // 'exit' can come before the pipes are read to their end: the control socket may still hold
        // the last reply (a stub that answers and exits, as auto_complete_config's does), stdout and
        // stderr the last lines (finalize's, a traceback). All are read to their end, for at most 200 ms, first.
        const open = [this.child.stdio[3] as Readable | null, this.child.stdout, this.child.stderr].filter((s): s is Readable => !!s && !s.readableEnded && !s.destroyed);
        let timer: NodeJS.Timeout | undefined;
        const drained = Promise.allSettled(open.map((s) => finished(s, { writable: false })));
        void Promise.race([drained, new Promise((r) => (timer = setTimeout(r, 200)))]).then(() => {
          clearTimeout(timer);
          this.channel.close();
          for (const fd of this.fds.splice(0)) closeSync(fd);
          resolve();
          this.onExit(this.describeExit());
        });
      };
      this.child.once('exit', done);
      this.child.once('error', (err) => {
        this.stderrTail.push(err.message);
        done(null, null);
      });
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.exitInfo === undefined;
  }

  private get tag(): string {
    return `${this.opts.model} (${this.opts.instance}, pid ${this.child.pid ?? '?'})`;
  }

  private pipeLines(stream: NodeJS.ReadableStream, line: (s: string) => void): void {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      const lines = (rest + chunk).split('\n');
      rest = lines.pop()!;
      for (const l of lines) line(l.replace(/\r$/, ''));
    });
    stream.on('end', () => {
      if (rest) line(rest);
      rest = '';
    });
  }

  private receive(m: StubMessage): void {
    if (this.waiting?.kinds.has(m.k)) {
      const w = this.waiting;
      this.waiting = undefined;
      w.resolve(m);
      return;
    }
    this.onMessage(m);
  }

  /** The next message of one of `kinds`, or a rejection when the process ends (or `timeoutMs` passes). */
  waitFor(kinds: string[], what: string, timeoutMs?: number): Promise<StubMessage> {
    return new Promise<StubMessage>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter = {
        kinds: new Set(kinds),
        resolve: (m: StubMessage) => {
          clearTimeout(timer);
          resolve(m);
        },
      };
      this.waiting = waiter;
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          if (this.waiting === waiter) this.waiting = undefined;
          this.kill();
          reject(new TsiError('UNAVAILABLE', `${what}: the Python process did not start within ${Math.round(timeoutMs / 1000)} s (stub-timeout-seconds)`));
        }, timeoutMs);
      }
      void this.exited.then(() => {
        clearTimeout(timer);
        if (this.waiting !== waiter) return;
        this.waiting = undefined;
        // A serving stub that dies before it is ready gets Triton's sentence (load-failure log checks match it).
        const triton = this.mode === 'serve' ? `Stub process '${this.opts.instance}' is not healthy. ` : '';
        reject(new TsiError('INTERNAL', `${what}: ${triton}${triton ? 'The' : 'the'} Python process ${this.describeExit()}`));
      });
    });
  }

  /** Waits for the interpreter to come up, then sends `first` and waits for one of `answers`. */
  async handshake(first: StubMessage, answers: string[], what: string): Promise<StubMessage> {
    await this.waitFor(['hello'], what, this.opts.startTimeoutMs);
    const reply = this.waitFor([...answers, 'ierr'], what);
    this.channel.send(first);
    const m = await reply;
    if (m.k === 'ierr') throw new TsiError('INTERNAL', `${what}: ${lastLines(String(m.m))}`);
    return m;
  }

  send(m: StubMessage): void {
    this.channel.send(m);
  }

  /** "exited with code 1" / "was killed by signal SIGKILL", and the last lines it wrote to stderr. */
  describeExit(): string {
    const e = this.exitInfo;
    const text = !e ? 'is running' : e.signal ? `was killed by signal ${e.signal}` : e.code === null ? 'could not be started' : `exited with code ${e.code}`;
    const lines = crashLines(this.stderrTail);
    return lines.length > 0 ? `${text}; its last stderr lines: ${lines.join(' | ')}` : text;
  }

  /** Asks the model to finalize (`fin`), then ends the process, killing it (and saying so) after `timeoutMs`. */
  async stop(timeoutMs: number): Promise<void> {
    if (!this.alive) return this.exited;
    this.channel.send({ k: 'fin' });
    const timer = setTimeout(() => {
      this.opts.log.warn(`${this.opts.model} (${this.opts.instance}): finalize() did not return within ${Math.round(timeoutMs / 1000)} s `
        + '(stub-timeout-seconds); the Python process was killed');
      this.kill();
    }, timeoutMs);
    await this.exited;
    clearTimeout(timer);
  }

  kill(): void {
    if (this.alive) this.child.kill('SIGKILL');
  }
}

/**
 * What stderr says about a crash: for a fault in native code, faulthandler's "Fatal Python error"
 * line and the frames of the crashing thread outside tsi's stub (the model's own); otherwise the
 * last lines written.
 */
function crashLines(tail: readonly string[]): string[] {
  const lines = tail.map((l) => l.trim()).filter((l) => l !== '');
  const fatal = lines.findLastIndex((l) => l.startsWith('Fatal Python error'));
  if (fatal < 0) return lines.slice(-5);
  const current = lines.findIndex((l, i) => i > fatal && l.startsWith('Current thread'));
  const frames = current < 0 ? [] : lines.slice(current + 1).filter((l) => l.startsWith('File ') && !l.includes(STUB_DIR)).slice(0, 3);
  return [lines[fatal]!, ...frames];
}

/** The end of a Python traceback: the lines that say what went wrong, not the whole stack. */
function lastLines(text: string, n = 4): string {
  const lines = text.trimEnd().split('\n').filter((l) => l.trim() !== '');
  return lines.slice(-n).map((l) => l.trim()).join(' | ');
}
