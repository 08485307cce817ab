/**
 * The `llm` backend in the browser build as users meet it, in headless Chromium driven by
 * playwright-core: the demo page served by `tsi-node serve --browser-demo` chats with tiny_gpt in the
 * page, its reply growing token by token on screen, equal (greedy) to the Node server's, and Stop
 * ends a long reply early; and a Service Worker answers OpenAI clients' `/v1/chat/completions`
 * (streamed), `/v1/responses`, Anthropic's `/v1/messages` (streamed) and `/tokenize` for a static
 * site with no server behind it.
 */

import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeWith } from '../helpers/capability.js';
import { chromiumMissing, serviceWorkerPage, startRig, within, type Rig, type StaticSite } from './static-server.js';

const withChromium = describeWith(!!process.env.CI, 'Chromium', chromiumMissing());

const CHAT = {
  model: 'tiny_gpt', stream: true, stream_options: { include_usage: true }, max_tokens: 12, temperature: 0,
  messages: [{ role: 'user', content: 'Hello from a service worker!' }],
};

withChromium('tiny_gpt in the browser build', () => {
  let rig: Rig;
  let site: StaticSite;
  let browser: Browser;
  let node: string;

  beforeAll(async () => {
    rig = await startRig(['tiny_gpt', 'simple'], { '/sw.html': serviceWorkerPage('tiny_gpt') }, true);
    ({ node, site, browser } = rig);
  });
  afterAll(async () => {
    await rig?.close();
  });

  async function demo(): Promise<Page> {
    const p = await browser.newPage();
    await p.goto(`${node}/demo`);
    await within(60_000, p.waitForSelector('#chat-send:not([disabled])', { timeout: 60_000 }), 'demo chat start');
    expect(await p.$$eval('#chat-model option', (o) => o.map((x) => (x as HTMLOptionElement).value))).toEqual(['tiny_gpt']);
    return p;
  }

  it('the demo chats with tiny_gpt in the page, streaming its reply, the same as the server\'s', async () => {
    const p = await demo();
    // Every change of the reply's text, as the page shows it.
    await p.evaluate(() => {
      (window as any).replyTexts = [];
      new MutationObserver(() => {
        const r = document.querySelector('.msg.assistant:last-child');
        if (r) (window as any).replyTexts.push(r.textContent);
      }).observe(document.getElementById('chat-log')!, { subtree: true, childList: true, characterData: true });
    });
    await p.fill('#chat-max-tokens', '24');
    await p.fill('#chat-input', 'Hello!');
    await p.press('#chat-input', 'Enter');
    await within(60_000, p.waitForSelector('#chat-check[data-same]', { timeout: 60_000 }), 'demo chat reply');
    expect(await p.$eval('#chat-check', (e) => [e.getAttribute('data-same'), e.textContent])).toEqual(['true', expect.stringMatching(/same reply/)]);
    const status = await p.$eval('#chat-status', (e) => e.textContent);
    expect(status).toMatch(/^wasm: 24 tokens in [\d.]+ s .*finish: length$/);
    const reply = await p.$eval('.msg.assistant', (e) => e.textContent);
    const want = await (await fetch(`${node}/v1/chat/completions`, {
      method: 'POST', body: JSON.stringify({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 24, temperature: 0 }),
    })).json();
    expect(reply).toBe(want.choices[0].message.content);
    // Token by token: the text on screen grew through many distinct prefixes of the reply.
    const seen = [...new Set(((await p.evaluate(() => (window as any).replyTexts)) as string[]).filter((t) => t.length > 0))];
    expect(seen.length).toBeGreaterThan(12);
    for (const t of seen) expect(reply!.startsWith(t)).toBe(true);
    await p.close();
  });

  it('Stop ends a long reply early, and the next message still gets its answer', async () => {
    const p = await demo();
    await p.fill('#chat-max-tokens', '450');
    await p.fill('#chat-input', 'Tell me a long story');
    await p.click('#chat-send');
    await within(60_000, p.waitForFunction(() => (document.querySelector('.msg.assistant')?.textContent?.length ?? 0) > 0, null, { timeout: 60_000 }), 'first tokens');
    await p.click('#chat-stop');
    await within(30_000, p.waitForSelector('#chat-status[data-done="stopped"]', { timeout: 30_000 }), 'stopped');
    const cut = (await p.$eval('.msg.assistant', (e) => e.textContent))!;
    await p.fill('#chat-max-tokens', '4');
    await p.fill('#chat-input', 'And now?');
    await p.click('#chat-send');
    await within(60_000, p.waitForSelector('#chat-status[data-done="finished"]', { timeout: 60_000 }), 'second reply');
    expect(await p.$$eval('.msg', (m) => m.map((x) => x.className))).toEqual(['msg user', 'msg assistant', 'msg user', 'msg assistant']);
    expect(await p.$eval('#chat-status', (e) => e.textContent)).toMatch(/: 4 tokens in/);
    // The stopped reply is a strict prefix of the whole greedy reply (tokens are several characters
    // each, so its length alone says nothing about how many tokens were generated).
    const whole = await (await fetch(`${node}/v1/chat/completions`, {
      method: 'POST', body: JSON.stringify({ model: 'tiny_gpt', messages: [{ role: 'user', content: 'Tell me a long story' }], max_tokens: 450, temperature: 0 }),
    })).json();
    const full: string = whole.choices[0].message.content;
    expect(cut.length).toBeGreaterThan(0);
    expect(full.startsWith(cut)).toBe(true);
    expect(cut.length).toBeLessThan(full.length);
    await p.close();
  });

  it('a Service Worker answers OpenAI chat completions, streamed, for a site with no server', async () => {
    const p = await browser.newPage();
    await p.goto(`${site.url}/sw.html`);
    await within(60_000, p.waitForFunction(() => (window as any).controlled, null, { timeout: 60_000 }), 'service worker control');
    const got = await within(60_000, p.evaluate(async (chat) => {
      const models = await (await fetch('/v1/models')).json();
      const res = await fetch('/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(chat) });
      const reader = res.body!.getReader();
      const text = new TextDecoder();
      const reads: string[] = [];
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        reads.push(text.decode(value, { stream: true }));
      }
      return { models: models.data.map((m: any) => m.id), type: res.headers.get('content-type'), reads };
    }, CHAT), 'chat through the service worker');
    const want = await (await fetch(`${node}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(CHAT) })).text();
    const content = (sse: string) => sse.split('\n\n').filter((e) => e.startsWith('data: {'))
      .map((e) => JSON.parse(e.slice(6)).choices[0]?.delta?.content ?? '').join('');
    expect(got.models).toEqual(['tiny_gpt']);
    expect(got.type).toMatch(/^text\/event-stream/);
    expect(got.reads.join('').endsWith('data: [DONE]\n\n')).toBe(true);
    expect(content(got.reads.join(''))).toBe(content(want));
    // The events came through the worker as a stream, not as one body.
    expect(got.reads.length).toBeGreaterThan(3);
    await p.close();
  });
  it('a Service Worker answers /v1/responses, /v1/messages (streamed) and /tokenize as the Node server does', async () => {
    const p = await browser.newPage();
    await p.goto(`${site.url}/sw.html`);
    await within(60_000, p.waitForFunction(() => (window as any).controlled, null, { timeout: 60_000 }), 'service worker control');
    const RESPONSES = { model: 'tiny_gpt', input: 'Hello from the page', instructions: 'Be brief', max_output_tokens: 10, temperature: 0 };
    const MESSAGES = { model: 'tiny_gpt', max_tokens: 10, stream: true, system: 'Be brief', messages: [{ role: 'user', content: 'Hello from the page' }] };
    const TOKENIZE = { model: 'tiny_gpt', prompt: 'Hello from the page' };
    /** The Node server's answer to the same request. */
    const ask = async (path: string, body: unknown) => (await fetch(`${node}${path}`, { method: 'POST', body: JSON.stringify(body) })).text();
    const got = await within(60_000, p.evaluate(async ([r, m, t]) => {
      const post = async (path: string, body: unknown) => (await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) })).text();
      return { responses: await post('/v1/responses', r), messages: await post('/v1/messages', m), tokenize: await post('/tokenize', t) };
    }, [RESPONSES, MESSAGES, TOKENIZE] as const), 'responses and messages through the service worker');
    const outputText = (json: string) => JSON.parse(json).output.flatMap((o: any) => o.content ?? []).map((c: any) => c.text).join('');
    const want = JSON.parse(await ask('/v1/responses', RESPONSES));
    expect(JSON.parse(got.responses).object).toBe('response');
    expect(outputText(got.responses)).toBe(outputText(JSON.stringify(want)));
    expect(JSON.parse(got.responses).usage).toEqual(want.usage);
    // Anthropic's events, in order, with the same text deltas.
    const events = (sse: string) => sse.split('\n\n').filter((e) => e.startsWith('event: ')).map((e) => JSON.parse(e.slice(e.indexOf('data: ') + 6)));
    const mine = events(got.messages);
    const theirs = events(await ask('/v1/messages', MESSAGES));
    const text = (es: any[]) => es.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text).join('');
    expect(mine.map((e) => e.type)).toEqual(theirs.map((e) => e.type));
    expect(mine[0].type).toBe('message_start');
    expect(mine[mine.length - 1].type).toBe('message_stop');
    expect(text(mine)).toBe(text(theirs));
    expect(text(mine).length).toBeGreaterThan(0);
    expect(JSON.parse(got.tokenize)).toEqual(JSON.parse(await ask('/tokenize', TOKENIZE)));
    await p.close();
  });
});
