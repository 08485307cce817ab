/**
 * The model-configuration pipeline, as pure steps: parse (pbtxt.ts for config.pbtxt, json.ts for
 * config.json, both driven by reflect.ts over the generated model-config-schema.ts) -> backend
 * auto-complete (model-io.ts) -> normalise defaults -> validate (validate.ts, ensemble-validate.ts) ->
 * diff on reload. pipeline.ts strings the steps together; model-config.ts is the config's TypeScript
 * shape, in model_config.proto's snake_case.
 */

export * from './pipeline.js';
