/**
 * The demo page's chat section: talks to an `llm` model (the default repository's tiny_gpt) served in
 * this page by tsi's LLM engine on onnxruntime-web, through the OpenAI route `/v1/chat/completions`
 * of the in-page server's `fetch`, and shows the reply token by token as the stream arrives, with
 * the device, time to first token and tokens/s. Stop aborts the request (its sequence leaves the
 * batch at the next step). A greedy reply (temperature 0) is checked against the tsi-node server
 * that served the page, which runs the same model on onnxruntime-node.
 */

// The page's servers (one per device, models loaded on first use) are the other section's.
import { pageServer } from './demo.js';
import type { DevicePreference } from './index.js';

const q = new URLSearchParams(location.search);
const NODE = (q.get('server') ?? location.origin).replace(/\/$/, '');

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

interface Message { role: 'user' | 'assistant'; content: string }

const post = (body: unknown, signal?: AbortSignal): RequestInit => ({
  method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' }, signal,
});

/** Each `data:` payload of a server-sent-event stream, as it arrives. */
async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const reader = body.getReader();
  const text = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buf += text.decode(value, { stream: true });
      let end: number;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, end);
        buf = buf.slice(end + 2);
        if (event.startsWith('data: ')) yield event.slice('data: '.length);
      }
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
}

const history: Message[] = [];
let stop: AbortController | undefined;

function bubble(role: Message['role'], text: string): HTMLElement {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.textContent = text;
  $('chat-log').append(div);
  return div;
}

async function send(): Promise<void> {
  const input = $<HTMLTextAreaElement>('chat-input');
  const content = input.value.trim();
  if (!content) return;
  input.value = '';
  const model = $<HTMLSelectElement>('chat-model').value;
  const device = $<HTMLSelectElement>('chat-device').value as DevicePreference;
  const temperature = Math.max(0, Number($<HTMLInputElement>('chat-temperature').value) || 0);
  const maxTokens = Math.max(1, Number($<HTMLInputElement>('chat-max-tokens').value) || 32);
  const status = $('chat-status');
  const check = $('chat-check');
  check.textContent = '';
  check.removeAttribute('data-same');
  history.push({ role: 'user', content });
  bubble('user', content);
  const reply = bubble('assistant', '');
  reply.dataset.streaming = 'true';

  const server = await pageServer(device);
  if (!server.ready(model)) {
    status.textContent = `loading ${model}…`;
    await server.load(model);
  }
  const where = server.instances(model).map((i) => i.device + (i.fallbackReason ? ` (${i.fallbackReason})` : '')).join(', ');
  const request = { model, messages: [...history], max_tokens: maxTokens, temperature, stream: true, stream_options: { include_usage: true } };
  stop = new AbortController();
  $<HTMLButtonElement>('chat-stop').disabled = false;
  const t0 = performance.now();
  let first = 0;
  let tokens = 0;
  let finish = '';
  try {
    const res = await server.fetch('/v1/chat/completions', post(request, stop.signal));
    if (!res.ok) throw new Error(((await res.json()) as { error: { message: string } }).error.message);
    for await (const data of sseData(res.body!)) {
      if (data === '[DONE]') break;
      const chunk = JSON.parse(data) as { choices: { delta?: { content?: string }; finish_reason?: string | null }[]; usage?: { completion_tokens: number } };
      const piece = chunk.choices[0]?.delta?.content ?? '';
      if (piece) {
        first ||= performance.now();
        reply.textContent += piece;
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      status.textContent = `streaming on ${where}…`;
    }
  } catch (err) {
    if (!stop.signal.aborted) throw err;
  } finally {
    delete reply.dataset.streaming;
    $<HTMLButtonElement>('chat-stop').disabled = true;
  }
  const stopped = stop.signal.aborted;
  history.push({ role: 'assistant', content: reply.textContent ?? '' });
  const s = (performance.now() - t0) / 1000;
  status.textContent = stopped
    ? `stopped after ${s.toFixed(2)} s on ${where}`
    : `${where}: ${tokens} tokens in ${s.toFixed(2)} s (${(tokens / s).toFixed(1)} tokens/s), first token after ${(first ? first - t0 : 0).toFixed(0)} ms, finish: ${finish}`;
  status.dataset.done = stopped ? 'stopped' : 'finished';
  if (stopped || temperature > 0) return;
  const r = await fetch(`${NODE}/v1/chat/completions`, post({ ...request, stream: false }));
  const theirs = ((await r.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
  const same = theirs === reply.textContent;
  check.dataset.same = String(same);
  check.textContent = same ? 'tsi-node gives the same reply (greedy).' : `tsi-node replies differently: ${JSON.stringify(theirs)}`;
}

async function main(): Promise<void> {
  const index = (await (await fetch(`${NODE}/v2/repository/index`, { method: 'POST' })).json()) as { name: string; state: string }[];
  const select = $<HTMLSelectElement>('chat-model');
  for (const e of index.filter((m) => m.state === 'READY')) {
    const cfg = (await (await fetch(`${NODE}/v2/models/${e.name}/config`)).json()) as { backend?: string };
    if (cfg.backend === 'llm' && !select.querySelector(`option[value="${e.name}"]`)) select.append(new Option(e.name, e.name));
  }
  if (select.options.length === 0) {
    $('chat-status').textContent = 'The server has no llm model loaded.';
    return;
  }
  const button = $<HTMLButtonElement>('chat-send');
  button.disabled = false;
  $('chat-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (button.disabled) return;
    button.disabled = true;
    send().catch((err) => {
      $('chat-status').textContent = `Error: ${(err as Error).message}`;
      $('chat-status').dataset.done = 'error';
    }).finally(() => (button.disabled = false));
  });
  $('chat-stop').addEventListener('click', () => stop?.abort());
  $('chat-input').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) {
      ev.preventDefault();
      $<HTMLFormElement>('chat-form').requestSubmit();
    }
  });
}

main().catch((err) => ($('chat-status').textContent = `failed to start: ${(err as Error).message}`));
