/**
 * Tool calls read from a model's output as it is generated, so that a streamed answer sends them as
 * OpenAI does: a call's first delta (index, id, type, name) as soon as its name is complete, then its
 * arguments in pieces as the model writes them; text outside the calls' markup as content. The
 * formats are tools.ts's (`hermes`, `llama3_json`, `mistral`). The whole answer is read by the same
 * code (`parseToolCalls`), so the pieces of a stream always join into the whole answer's calls.
 *
 * A call's arguments are the model's JSON with the whitespace outside its strings removed (for the
 * usual outputs, `JSON.stringify` of what it parses to; numbers and escapes stay as written). Output
 * that does not read as calls stays content, as vLLM's parsers leave it: a stream can take back
 * nothing it sent, so a call that fails after its first delta went out (cut by max_tokens, broken
 * JSON) ends the calls there and the finish reason stays the model's; the whole answer then has no
 * calls and the text as content.
 */

import type { ToolParser } from './tools.js';

/** What the stream says, in order: content text, a call's start, or a piece of its arguments. */
export type ToolEvent =
  | { kind: 'content'; text: string }
  | { kind: 'call'; index: number; id: string; name: string }
  | { kind: 'args'; index: number; text: string };

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

const callId = () => `call_${crypto.randomUUID().replace(/-/g, '').slice(0, 24)}`;

const WS = /\s/;

/**
 * One call object `{"name": …, "arguments"|"parameters": …}` read a character at a time: where its
 * top-level keys and values are, its name once whole, and its arguments (minified) as they come.
 */
class CallScan {
  raw = '';
  name?: string;
  /** The arguments so far, when they are an object or a list (streamed); whole otherwise, once read. */
  args = '';
  argsStreamed = false;
  argsDone = false;
  closed = false;
  error = false;
  private depth = 0;
  private inStr = false;
  private esc = false;
  private phase: 'key' | 'colon' | 'value' | 'scalar' | 'nested' | 'string' | 'after' = 'key';
  private keyStart = 0;
  private key = '';
  private valStart = 0;
  /** The key whose value holds the arguments (the first of `arguments` and `parameters`). */
  private argsKey?: string;

  private get inArgs(): boolean {
    return this.key === this.argsKey && (this.phase === 'nested' || this.phase === 'string');
  }

  /** Reads one character; the first must be '{'. */
  feed(c: string): void {
    const o = this.raw.length;
    this.raw += c;
    if (this.depth === 0) {
      if (c === '{') this.depth = 1;
      else this.error = true;
      return;
    }
    if (this.inStr) {
      if (this.inArgs && this.argsStreamed) this.args += c;
      if (this.esc) this.esc = false;
      else if (c === '\\') this.esc = true;
      else if (c === '"') {
        this.inStr = false;
        if (this.depth === 1 && this.phase === 'key') {
          this.key = JSON.parse(this.raw.slice(this.keyStart, o + 1)) as string;
          this.phase = 'colon';
        } else if (this.depth === 1 && this.phase === 'string') this.value(o + 1);
      }
      return;
    }
    if (this.depth > 1) {
      if (WS.test(c)) return;
      if (this.inArgs && this.argsStreamed) this.args += c;
      if (c === '"') this.inStr = true;
      else if (c === '{' || c === '[') this.depth++;
      else if (c === '}' || c === ']') {
        if (--this.depth === 1) this.value(o + 1);
      }
      return;
    }
    switch (this.phase) {
      case 'key':
        if (c === '"') {
          this.inStr = true;
          this.keyStart = o;
        } else if (c === '}') this.close();
        else if (!WS.test(c)) this.error = true;
        return;
      case 'colon':
        if (c === ':') this.phase = 'value';
        else if (!WS.test(c)) this.error = true;
        return;
      case 'value':
        if (WS.test(c)) return;
        this.valStart = o;
        if (this.argsKey === undefined && (this.key === 'arguments' || this.key === 'parameters')) this.argsKey = this.key;
        if (c === '{' || c === '[') {
          this.phase = 'nested';
          this.depth++;
          if (this.key === this.argsKey) {
            this.argsStreamed = true;
            this.args = c;
          }
        } else if (c === '"') {
          this.phase = 'string';
          this.inStr = true;
        } else this.phase = 'scalar';
        return;
      case 'scalar':
        if (c === ',' || c === '}' || WS.test(c)) {
          this.value(o);
          if (c === ',') this.phase = 'key';
          else if (c === '}') this.close();
        }
        return;
      case 'after':
        if (c === ',') this.phase = 'key';
        else if (c === '}') this.close();
        else if (!WS.test(c)) this.error = true;
        return;
      default:
        this.error = true;
    }
  }

  /** A top-level value ended just before `end`. */
  private value(end: number): void {
    this.phase = 'after';
    const text = this.raw.slice(this.valStart, end);
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch {
      this.error = true;
      return;
    }
    if (this.key === 'name' && this.name === undefined) {
      if (typeof v === 'string') this.name = v;
      else this.error = true;
    } else if (this.key === this.argsKey && !this.argsDone) {
      this.argsDone = true;
      if (!this.argsStreamed) this.args = typeof v === 'string' ? v : v === null ? '{}' : text;
    }
  }

  private close(): void {
    this.depth = 0;
    this.closed = true;
    try {
      JSON.parse(this.raw);
    } catch {
      this.error = true;
      return;
    }
    if (this.name === undefined) this.error = true;
    if (!this.argsDone) {
      this.argsDone = true;
      this.args = '{}';
    }
  }
}

type Mode = 'lead' | 'content' | 'open' | 'list' | 'call' | 'after' | 'text' | 'drop';

const MARKERS: Partial<Record<ToolParser, string>> = { hermes: '<tool_call>', mistral: '[TOOL_CALLS]' };
const HERMES_CLOSE = '</tool_call>';
const PYTHON_TAG = '<|python_tag|>';

/** Reads one choice's output as it comes; `push` each piece, the last with `final`. */
export class ToolCallStream {
  /** Calls whose first delta went out (the ones `parallel: false` keeps). */
  calls = 0;
  /** Calls read whole. */
  complete = 0;
  /** A call failed after calls went out: nothing more is read. */
  failed = false;
  private text = '';
  private at = 0;
  private mode: Mode;
  private held = '';
  private callFrom = 0;
  private inList = false;
  private scan?: CallScan;
  private seen = 0;
  private current?: { index: number; sentArgs: number; header: boolean; kept: boolean };
  private readonly marker?: string;

  constructor(private readonly parser: ToolParser, private readonly parallel: boolean) {
    this.marker = MARKERS[parser];
    this.mode = parser === 'llama3_json' ? 'lead' : 'content';
  }

  /** Whether the answer is tool calls (its finish reason `tool_calls`). */
  get called(): boolean {
    return this.calls > 0 && !this.failed && this.complete >= this.calls;
  }

  push(piece: string, final: boolean): ToolEvent[] {
    this.text += piece;
    const out: ToolEvent[] = [];
    while (this.step(out, final));
    if (final) this.finish(out);
    return merge(out);
  }

  /** One move of the reader; false when it needs more text. */
  private step(out: ToolEvent[], final: boolean): boolean {
    const t = this.text;
    switch (this.mode) {
      case 'text':
        if (this.at < t.length) this.content(out, t.slice(this.at));
        this.at = t.length;
        return false;
      case 'drop':
        this.at = t.length;
        return false;
      case 'lead': {
        // llama3_json: a call is the whole answer, so an answer that starts like one is held.
        const rest = t.slice(this.at);
        const lead = rest.trimStart();
        if (lead.length === 0) {
          if (!final) return false;
          this.mode = 'text';
          return true;
        }
        this.callFrom = this.at;
        if (lead.startsWith('{')) {
          this.at += rest.length - lead.length;
          this.mode = 'call';
        } else if (lead.startsWith(PYTHON_TAG)) {
          this.at += rest.length - lead.length + PYTHON_TAG.length;
          this.mode = 'open';
        } else if (PYTHON_TAG.startsWith(lead) && !final) return false;
        else this.mode = 'text';
        return true;
      }
      case 'content': {
        const m = this.marker!;
        const hit = t.indexOf(m, this.at);
        if (hit >= 0) {
          this.content(out, t.slice(this.at, hit));
          this.callFrom = hit;
          this.at = hit + m.length;
          this.mode = 'open';
          return true;
        }
        // A marker's beginning at the end may still become one.
        let end = t.length;
        if (!final) {
          for (let k = Math.min(m.length - 1, t.length - this.at); k > 0; k--) {
            if (t.endsWith(m.slice(0, k))) {
              end = t.length - k;
              break;
            }
          }
        }
        this.content(out, t.slice(this.at, end));
        this.at = end;
        return false;
      }
      case 'open':
      case 'list': {
        const c = this.nextChar();
        if (c === undefined) return false;
        if (c === '{') {
          this.start();
          return true;
        }
        if (this.mode === 'open' && this.parser === 'mistral' && c === '[') {
          this.inList = true;
          this.at++;
          this.mode = 'list';
          return true;
        }
        this.fail();
        return true;
      }
      case 'call':
        return this.readCall(out);
      case 'after':
        return this.afterCall();
    }
  }

  /** The next character that is not whitespace (skipping the whitespace), or undefined. */
  private nextChar(): string | undefined {
    while (this.at < this.text.length && WS.test(this.text[this.at]!)) this.at++;
    return this.text[this.at];
  }

  private start(): void {
    this.scan = new CallScan();
    const index = this.seen++;
    this.current = { index: this.calls, sentArgs: 0, header: false, kept: index === 0 || this.parallel };
    this.mode = 'call';
  }

  private readCall(out: ToolEvent[]): boolean {
    const s = this.scan ?? (this.start(), this.scan!);
    const cur = this.current!;
    const t = this.text;
    while (this.at < t.length && !s.closed && !s.error) s.feed(t[this.at++]!);
    if (s.error) {
      this.fail();
      return true;
    }
    // Whitespace between content and a call is no content.
    if (s.name !== undefined) this.held = '';
    if (cur.kept) {
      if (!cur.header && s.name !== undefined) {
        cur.header = true;
        this.calls++;
        out.push({ kind: 'call', index: cur.index, id: callId(), name: s.name });
      }
      if (cur.header && (s.argsStreamed || s.closed) && s.args.length > cur.sentArgs) {
        out.push({ kind: 'args', index: cur.index, text: s.args.slice(cur.sentArgs) });
        cur.sentArgs = s.args.length;
      }
    }
    if (!s.closed) return false;
    if (cur.kept) this.complete++;
    this.scan = undefined;
    this.mode = 'after';
    return true;
  }

  private afterCall(): boolean {
    if (this.parser === 'hermes') {
      const end = this.text.indexOf(HERMES_CLOSE, this.at);
      if (end < 0) return false;
      this.at = end + HERMES_CLOSE.length;
      this.mode = 'content';
      return true;
    }
    const c = this.nextChar();
    if (c === undefined) return false;
    this.at++;
    if (this.parser === 'llama3_json' && c === ';') this.mode = 'open';
    else if (this.parser === 'mistral' && this.inList && c === ',') this.mode = 'list';
    else if (this.parser === 'mistral' && this.inList && c === ']') this.mode = 'drop';
    else {
      // Text after the calls is no call: the whole answer then reads as content.
      this.mode = 'drop';
      this.failed = true;
    }
    return true;
  }

  /**
   * The markup begun at `callFrom` is no call. Before any call went out it was content after all;
   * after one, the calls end there.
   */
  private fail(): void {
    this.scan = undefined;
    if (this.seen > 1 || this.calls > 0) {
      this.failed = true;
      this.mode = 'drop';
      return;
    }
    this.at = this.callFrom;
    this.mode = 'text';
  }

  private finish(out: ToolEvent[]): void {
    if (this.mode === 'call' || this.mode === 'open' || this.mode === 'list' || (this.mode === 'after' && this.parser === 'mistral' && this.inList)) {
      this.fail();
      this.step(out, true);
    }
    // Whitespace at the end of an answer with calls is no content.
    if (this.calls === 0 && this.held) out.push({ kind: 'content', text: this.held });
    this.held = '';
  }

  /** Content, holding back trailing whitespace (dropped if a call follows). */
  private content(out: ToolEvent[], s: string): void {
    const all = this.held + s;
    const cut = all.length - (/\s*$/.exec(all)![0].length);
    if (cut > 0) out.push({ kind: 'content', text: all.slice(0, cut) });
    this.held = all.slice(cut);
  }
}

/** Neighbouring events of one kind and call as one. */
function merge(events: ToolEvent[]): ToolEvent[] {
  const out: ToolEvent[] = [];
  for (const e of events) {
    const last = out[out.length - 1];
    if (last && e.kind !== 'call' && last.kind === e.kind && (e.kind === 'content' || (last as { index: number }).index === e.index)) {
      (last as { text: string }).text += e.text;
    } else out.push({ ...e });
  }
  return out;
}

/**
 * The calls in a whole output and the text around them (null when there is none): what a stream of
 * the same text sends, joined. Output that does not read as calls stays content.
 */
export function parseToolCalls(text: string, parser: ToolParser, parallel = true): { content: string | null; calls: ToolCall[] } {
  const s = new ToolCallStream(parser, parallel);
  const events = s.push(text, true);
  if (!s.called) return { content: text, calls: [] };
  const calls: ToolCall[] = [];
  let content = '';
  for (const e of events) {
    if (e.kind === 'content') content += e.text;
    else if (e.kind === 'call') calls[e.index] = { id: e.id, type: 'function', function: { name: e.name, arguments: '' } };
    else calls[e.index]!.function.arguments += e.text;
  }
  const rest = content.trim();
  return { content: rest.length > 0 ? rest : null, calls };
}
