/** The real `tsi-node` command line parsed without running it, for tests of flags and of the deploy manifests. */

import { buildCli } from '../../runtime-node/cli.js';

/** Parses `tsi-node <argv>` with the real CLI, without running the command; returns serve's options. */
export async function parseServeArgs(argv: string[]): Promise<Record<string, any>> {
  const program = buildCli();
  const errors: string[] = [];
  let opts: Record<string, any> | undefined;
  for (const cmd of [program, ...program.commands]) {
    cmd.exitOverride();
    cmd.configureOutput({ writeErr: (s) => errors.push(s), writeOut: () => {} });
  }
  const serve = program.commands.find((c) => c.name() === 'serve')!;
  serve.action((o: Record<string, any>) => {
    opts = o;
  });
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    throw new Error(`tsi-node ${argv.join(' ')}: ${errors.join('') || (err as Error).message}`);
  }
  if (!opts) throw new Error(`tsi-node ${argv.join(' ')}: not a serve command line`);
  return opts;
}
