/**
 * Speech: audio in, text out. audio.ts decodes WAV, resamples to 16 kHz and computes Whisper's log-mel
 * features (flac.ts decodes FLAC); decoding.ts holds Whisper's forced tokens and per-step logit rules;
 * whisper.ts is the `whisper` backend (an onnx-community Whisper folder: encoder and merged
 * decoder on the runtime's onnxruntime backend, Whisper's forced tokens, timestamp rules and seek loop);
 * whisper-session.ts is its merged decoder as a decoder session, which the llm engine batches in flight.
 * The OpenAI audio routes over it are core/protocol/openai-audio.ts.
 */

export { AUDIO_ACCEPTED, SAMPLE_RATE, audioSamples, decodeAudio, encodeWav, logMel, logMelWhole, melFilters, resample } from './audio.js';
export { createWhisperBackend, isWhisperConfig, WHISPER_INPUTS, WHISPER_OUTPUTS, type Segment } from './whisper.js';
