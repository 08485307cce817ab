/**
 * What the OpenAI API needs of a loaded `llm` model, in a leaf file of its own: the `llm` backend
 * sets it on the model version's ModelStats (core/stats.ts) and the OpenAI routes read it there, so
 * the stats need only this contract and no import runs back from them to the backend.
 */

import type { ChatTemplate } from './chat.js';
import type { GenerationDefaults } from './params.js';
import type { LlmStats } from './stats.js';
import type { Tokenizer } from './tokenizer.js';
import type { ImageProcessor } from '../vision/image-input.js';

export interface LlmModelInfo {
  tokenizer: Tokenizer;
  chat: ChatTemplate;
  maxContext: number;
  defaults: GenerationDefaults;
  stats: LlmStats;
  /** A vision-language model's image processor (chat takes image parts). */
  vision?: ImageProcessor;
}
