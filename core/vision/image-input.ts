/**
 * An image of a chat prompt, ready for the model: what rides on the request from the front end to the
 * decoder session's prefill (types only, so the LLM files that carry it import nothing else of
 * vision/).
 */

export interface ImageInput {
  /**
   * The image's place in the token stream: its k-th image token is written `key + k` in the prompt's
   * ids (above any vocabulary), `key` derived from a hash of the image's bytes. So the prefix cache,
   * which matches ids, shares an image's cache only with a prompt holding the same image.
   */
  key: number;
  /** The image token id the chat template and processor write (the model's `image_token_id`). */
  tokenId: number;
  /** Image tokens the image takes in the prompt (frames × tokens per frame). */
  tokens: number;
  /** The vision encoder's `pixel_values`: [1, frames, 3, side, side], normalised as the processor does. */
  pixels: Float32Array;
  dims: number[];
}

/** The first id of the image keys: far above any vocabulary, and key + frames × tokens stays below 2^53. */
export const IMAGE_KEY_BASE = 2 ** 31;
/** Ids an image's key spans (image tokens it may hold). */
export const IMAGE_KEY_SPAN = 2 ** 13;

/** An image made ready, with where it sits in the processor's grid (0 × 0: one frame). */
export interface PreparedImage extends ImageInput {
  rows: number;
  cols: number;
}

/** What the chat route needs of a model's image processor (idefics3.ts), as a contract of its own. */
export interface ImageProcessor {
  readonly imageTokenId: number;
  /** The placeholder a prompt writes where an image goes (`<image>`). */
  readonly imageToken: string;
  /** An image's bytes made ready for the model; `what` names the request's part in refusals. */
  prepare(bytes: Uint8Array, what: string): Promise<PreparedImage>;
  /** The rendered prompt with each image placeholder expanded to the image's tokens. */
  expandPrompt(text: string, images: readonly PreparedImage[]): string;
}
