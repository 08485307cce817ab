/**
 * `npm run bench:<name> -- --markdown`: the bench's own printed results become its section of
 * docs/performance.md, replacing the section the last such run wrote, with the date, the machine
 * (CPU model, core count, OS, load average at the start) and the exact command. Importing this module
 * takes `--markdown` out of process.argv before the bench parses its flags (imports run before the
 * importing module's body), then tees what the bench prints; when the process ends with status 0 the
 * section is written. A bench that wants a proper markdown table hands it to `markdownTable` instead;
 * otherwise the section holds the text the bench printed. Nothing else in docs/performance.md is
 * touched: its prose lives outside the `<!-- bench:NAME -->` markers.
 */

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, platform, release } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** docs/performance.md, or TSI_PERFORMANCE_DOC (the helper's own test writes a scratch file). */
export const PERFORMANCE_DOC = process.env.TSI_PERFORMANCE_DOC ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'docs', 'performance.md');
/**
 * README.md (or TSI_README_DOC): a bench whose table the README shows (`<!-- bench:NAME -->` there too)
 * writes the same section into it, so the README's numbers are the same run's as docs/performance.md's.
 */
export const README_DOC = process.env.TSI_README_DOC ?? join(dirname(fileURLToPath(import.meta.url)), '..', 'README.md');

const at = process.argv.indexOf('--markdown');
/** Whether this run writes its section of docs/performance.md. */
export const MARKDOWN = at >= 0;
if (MARKDOWN) process.argv.splice(at, 1);

const startLoad = loadavg()[0]!;
const printed: string[] = [];
const tables: string[] = [];

if (MARKDOWN) {
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    printed.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));
    return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stdout.write;
  process.on('exit', (code) => {
    if (code !== 0) return;
    const name = benchName();
    const body = sectionBody(name);
    writeSection(name, body);
    process.stderr.write(`[bench] wrote the "${name}" section of ${PERFORMANCE_DOC}\n`);
    if (hasSection(README_DOC, name)) {
      writeSection(name, body, README_DOC);
      process.stderr.write(`[bench] wrote the "${name}" section of ${README_DOC}\n`);
    }
  });
}

/** `bench/batching.ts` → `batching`. */
function benchName(): string {
  return basename(process.argv[1] ?? 'bench', '.ts').replace(/\.[cm]?js$/, '');
}

/** A markdown table for the section (rows of cells; the first row is the header). */
export function markdownTable(title: string, rows: (string | number)[][]): void {
  if (!MARKDOWN || rows.length === 0) return;
  const [head, ...body] = rows;
  const line = (r: (string | number)[]) => `| ${r.map((c) => String(c).replaceAll('|', '\\|')).join(' | ')} |`;
  tables.push([`**${title}**`, '', line(head!), `|${head!.map(() => '---').join('|')}|`, ...body.map(line)].join('\n'));
}

/** The machine in one line: what the numbers depend on. */
export function machine(): string {
  const c = cpus();
  return `${c[0]?.model.trim() ?? 'unknown CPU'}, ${c.length} cores, ${platform()} ${release()}`;
}

function sectionBody(name: string): string {
  const args = process.argv.slice(2).join(' ');
  const command = `npm run bench:${name}${args ? ` -- ${args}` : ''}`;
  const out = [
    `Run ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC on ${machine()} (load average ${startLoad.toFixed(1)} at the start): \`${command}\``,
    '',
  ];
  if (tables.length > 0) out.push(tables.join('\n\n'));
  else out.push('```text', stripAnsi(printed.join('')).trimEnd(), '```');
  return out.join('\n');
}

const stripAnsi = (s: string) => s.replace(/\u001b\[[0-9;]*[A-Za-z]/g, '');

/** Whether `file` holds this bench's section, both markers in order (the README only gets one it shows). */
function hasSection(file: string, name: string): boolean {
  if (!existsSync(file)) return false;
  const doc = readFileSync(file, 'utf8');
  const i = doc.indexOf(`<!-- bench:${name} -->`);
  return i >= 0 && doc.indexOf(`<!-- /bench:${name} -->`, i) > i;
}

/** Replaces (or appends) the text between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`. */
export function writeSection(name: string, body: string, file = PERFORMANCE_DOC): void {
  const open = `<!-- bench:${name} -->`;
  const close = `<!-- /bench:${name} -->`;
  const doc = existsSync(file) ? readFileSync(file, 'utf8') : '# Performance\n';
  const block = `${open}\n${body}\n${close}`;
  const i = doc.indexOf(open);
  const j = doc.indexOf(close);
  const next = i >= 0 && j > i ? doc.slice(0, i) + block + doc.slice(j + close.length) : `${doc.trimEnd()}\n\n## ${name}\n\n${block}\n`;
  writeFileSync(file, next);
}
