/**
 * The models a server knows and how they come and go: repository.ts reads a model repository
 * through an injected file source, model.ts is one model's versions and instances, model-control.ts
 * the load/unload/poll extension, namespaces.ts `--model-namespacing` (one repository per root, names
 * resolved across them), residency.ts on-demand loading within a budget, warmup.ts runs
 * `model_warmup` samples before a version is READY.
 */

export * from './repository.js';
