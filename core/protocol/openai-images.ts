/**
 * Chat messages with images, for a vision-language `llm` model (core/vision/): each `image_url` part
 * read (a `data:` URL; an http(s) URL only when the runtime gives a fetcher, `--allow-image-urls` in
 * Node, whose checks — no private addresses, bounded size and time — are the runtime's), decoded and
 * made ready by the model's processor, and the messages given to the chat template as transformers.js
 * gives them to a processor's template: content as a list of `{type: 'text', text}` and
 * `{type: 'image'}` parts. Every refusal names the part (`messages[i].content[j]`).
 */

import { TsiError } from '../errors.js';
import type { ChatMessage } from '../llm/chat.js';
import type { LlmModelInfo } from '../llm/model-info.js';
import { dataUrlBytes } from '../vision/image-decode.js';
import type { PreparedImage } from '../vision/image-input.js';
import { bad } from './openai-answer.js';

type Json = Record<string, any>;

/** Fetches an http(s) image URL, or refuses it (an INVALID_ARG saying why); at most `maxBytes`. */
export type ImageFetcher = (url: string, maxBytes: number) => Promise<Uint8Array>;

/** Whether any message has an image part (a text model refuses them by name). */
export function imagePartAt(messages: unknown): string | undefined {
  if (!Array.isArray(messages)) return undefined;
  for (let i = 0; i < messages.length; i++) {
    const c = (messages[i] as Json)?.content;
    if (!Array.isArray(c)) continue;
    const j = c.findIndex((p: Json) => p?.type === 'image_url' || p?.type === 'image');
    if (j >= 0) return `messages[${i}].content[${j}]`;
  }
  return undefined;
}

/** The messages as the template takes them and the images in their order; the prompt's `<image>`s are expanded by the caller. */
export async function visionMessages(
  msgs: Json[], info: LlmModelInfo, model: string, extra: (m: Json) => Json, fetchImage: ImageFetcher | undefined, maxBytes: number,
): Promise<{ messages: ChatMessage[]; images: PreparedImage[] }> {
  const processor = info.vision!;
  const images: PreparedImage[] = [];
  const messages: ChatMessage[] = [];
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i]!;
    if (typeof m !== 'object' || m === null || typeof m.role !== 'string') throw bad(`messages[${i}] must be an object with a string 'role'`, 'messages');
    const c = m.content;
    const parts: Json[] = [];
    if (typeof c === 'string') parts.push({ type: 'text', text: c });
    else if (Array.isArray(c)) {
      for (let j = 0; j < c.length; j++) {
        const part = c[j] as Json;
        const what = `messages[${i}].content[${j}]`;
        if (part?.type === 'text' && typeof part.text === 'string') parts.push({ type: 'text', text: part.text });
        else if (part?.type === 'image_url') {
          const url = typeof part.image_url === 'string' ? part.image_url : part.image_url?.url;
          if (typeof url !== 'string' || url === '') throw bad(`${what}: an image_url part needs image_url.url (a data: URL or, where allowed, an http(s) URL)`, 'messages');
          const bytes = await imageBytes(url, what, fetchImage, maxBytes);
          try {
            images.push(await processor.prepare(bytes, what));
          } catch (err) {
            throw err instanceof TsiError ? bad(err.message, 'messages') : err;
          }
          parts.push({ type: 'image' });
        } else throw bad(`${what}: model '${model}' takes text and image_url parts, not ${JSON.stringify(part?.type ?? part)}`, 'messages');
      }
    } else if (c !== null && c !== undefined) throw bad(`messages[${i}].content must be a string or a list of parts`, 'messages');
    messages.push({ role: m.role, content: parts, ...extra(m) });
  }
  return { messages, images };
}

async function imageBytes(url: string, what: string, fetchImage: ImageFetcher | undefined, maxBytes: number): Promise<Uint8Array> {
  const scheme = url.slice(0, url.indexOf(':') + 1).toLowerCase();
  try {
    if (scheme === 'data:') return dataUrlBytes(url, `${what}.image_url`).bytes;
    if (scheme !== 'http:' && scheme !== 'https:') throw new TsiError('INVALID_ARG', `${what}.image_url: a URL of scheme '${scheme}'; a data: URL (or an http(s) URL where the server allows them) is expected`);
    if (!fetchImage) throw new TsiError('INVALID_ARG', `${what}.image_url: this server does not fetch image URLs (start it with --allow-image-urls); send the image as a data: URL`);
    return await fetchImage(url, maxBytes);
  } catch (err) {
    if (err instanceof TsiError && err.code === 'INVALID_ARG') throw bad(err.message.startsWith(what) ? err.message : `${what}.image_url: ${err.message}`, 'messages');
    throw err;
  }
}
