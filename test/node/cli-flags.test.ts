/**
 * The serve command's flags as users write them: every boolean flag takes `--flag`, `--flag true|false`
 * and `--flag=true|false` (Triton's `--allow-*` take a value, and scripts written for it pass one), and
 * values Triton refuses at start-up are refused here too.
 */

import { describe, expect, it } from 'vitest';
import { parseServeArgs } from '../helpers/cli.js';

// undefined: an alias whose absence leaves the flag it stands for to decide.
const BOOLEAN_FLAGS: [flag: string, key: string, byDefault: boolean | undefined][] = [
  ['--allow-http', 'allowHttp', true],
  ['--allow-grpc', 'allowGrpc', true],
  ['--allow-metrics', 'allowMetrics', true],
  ['--allow-cpu-metrics', 'allowCpuMetrics', true],
  ['--allow-gpu-metrics', 'allowGpuMetrics', true],
  ['--allow-client-shm', 'allowClientShm', false],
  ['--allow-model-code-upload', 'allowModelCodeUpload', false],
  ['--allow-dashboard', 'allowDashboard', false],
  ['--allow-image-urls', 'allowImageUrls', false],
  ['--allow-sagemaker', 'allowSagemaker', false],
  // Unset, AIP_MODE decides (true when it is PREDICTION).
  ['--allow-vertex-ai', 'allowVertexAi', undefined],
  ['--grpc-use-ssl', 'grpcUseSsl', false],
  ['--grpc-use-ssl-mutual', 'grpcUseSslMutual', false],
  ['--http-use-ssl', 'httpUseSsl', false],
  ['--http-use-ssl-mutual', 'httpUseSslMutual', false],
  ['--exit-on-error', 'exitOnError', true],
  ['--strict-readiness', 'strictReadiness', true],
  ['--disable-auto-complete-config', 'disableAutoCompleteConfig', false],
  ['--strict-model-config', 'strictModelConfig', false],
  ['--model-namespacing', 'modelNamespacing', false],
  ['--browser-demo', 'browserDemo', false],
  ['--log-info', 'logInfo', true],
  ['--log-warning', 'logWarning', true],
  ['--log-warn', 'logWarn', undefined],
  ['--log-error', 'logError', true],
];

describe('tsi-node serve: boolean flags', () => {
  for (const [flag, key, byDefault] of BOOLEAN_FLAGS) {
    it(`${flag}: bare, with a value, with =value, and its default (${byDefault})`, async () => {
      expect((await parseServeArgs(['serve']))[key]).toBe(byDefault);
      expect((await parseServeArgs(['serve', flag]))[key]).toBe(true);
      for (const v of [true, false]) {
        expect((await parseServeArgs(['serve', flag, String(v)]))[key]).toBe(v);
        expect((await parseServeArgs(['serve', `${flag}=${v}`]))[key]).toBe(v);
      }
      // A bare flag followed by another flag leaves that one alone.
      const both = await parseServeArgs(['serve', flag, '--http-port', '9000']);
      expect([both[key], both.httpPort]).toEqual([true, 9000]);
      await expect(parseServeArgs(['serve', flag, 'maybe'])).rejects.toThrow(/expected true or false, got 'maybe'/);
    });
  }

  it('lists every boolean flag of serve here', async () => {
    const { buildCli } = await import('../../runtime-node/cli.js');
    const serve = buildCli().commands.find((c) => c.name() === 'serve')!;
    const booleans = serve.options.filter((o) => o.flags.endsWith(' [bool]') || (!o.required && !o.optional)).map((o) => o.long);
    expect(booleans.sort()).toEqual(BOOLEAN_FLAGS.map(([f]) => f).sort());
  });
});

describe('tsi-node serve: --http-max-input-size', () => {
  it('refuses 0 and negative sizes, as Triton does', async () => {
    for (const v of ['0', '-1024']) {
      // Triton's line, alone (L0_http greps the log for it), not commander's "argument ... is invalid".
      await expect(parseServeArgs(['serve', `--http-max-input-size=${v}`])).rejects.toThrow(/^tsi-node serve --http-max-input-size=-?\d+: Error: --http-max-input-size must be greater than 0\.\n$/);
    }
    expect((await parseServeArgs(['serve', '--http-max-input-size', '1024'])).httpMaxInputSize).toBe(1024);
  });
});

describe('tsi-node serve: tritonserver\'s spellings and start-up checks', () => {
  it('--log-verbose takes true and false as 1 and 0 (SageMaker\'s serve script passes true)', async () => {
    expect((await parseServeArgs(['serve', '--log-verbose=true'])).logVerbose).toBe(1);
    expect((await parseServeArgs(['serve', '--log-verbose', 'false'])).logVerbose).toBe(0);
    expect((await parseServeArgs(['serve', '--log-verbose=2'])).logVerbose).toBe(2);
    await expect(parseServeArgs(['serve', '--log-verbose=maybe'])).rejects.toThrow(/expected a non-negative integer/);
  });

  it('--model-config-name refuses an empty name with Triton\'s text', async () => {
    expect((await parseServeArgs(['serve', '--model-config-name=h100'])).modelConfigName).toBe('h100');
    await expect(parseServeArgs(['serve', '--model-config-name='])).rejects.toThrow(/Error: empty argument for --model-config-name/);
  });

  it('--sagemaker-safe-port-range: a listener outside it, or two on one port, stop the start with Triton\'s texts', async () => {
    const { checkPortCollision } = await import('../../runtime-node/cli.js');
    expect((await parseServeArgs(['serve', '--sagemaker-safe-port-range=8081-9000'])).sagemakerSafePortRange).toEqual([8081, 9000]);
    await expect(parseServeArgs(['serve', '--sagemaker-safe-port-range=8081'])).rejects.toThrow(/expected <integer>-<integer>/);
    const sm = { service: 'SageMaker', address: '0.0.0.0', port: 8080, range: [8081, 9000] as [number, number] };
    expect(() => checkPortCollision([{ service: 'HTTP', address: '0.0.0.0', port: 8000 }, sm]))
      .toThrow('The server cannot listen to HTTP requests at port 8000, allowed port range is [8081, 9000]');
    expect(() => checkPortCollision([{ service: 'HTTP', address: '0.0.0.0', port: 8085 }, sm])).not.toThrow();
    expect(() => checkPortCollision([{ service: 'HTTP', address: '0.0.0.0', port: 8080 }, { service: 'Vertex AI', address: '0.0.0.0', port: 8080 }]))
      .toThrow('The server cannot listen to HTTP requests and Vertex AI requests at the same address and port 0.0.0.0:8080');
    expect(() => checkPortCollision([{ service: 'HTTP', address: '127.0.0.1', port: 8080 }, { service: 'Vertex AI', address: '0.0.0.0', port: 8080 }])).not.toThrow();
    // Port 0 is a free port the system picks: never a collision.
    expect(() => checkPortCollision([{ service: 'HTTP', address: '127.0.0.1', port: 0 }, { service: 'GRPC', address: '127.0.0.1', port: 0 }])).not.toThrow();
  });
});
