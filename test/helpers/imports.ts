/**
 * The module specifiers a source file imports (static, re-export, side-effect and dynamic imports),
 * read as text: the purity tests use it to keep platform-specific modules out of core/ and client/.
 */

export function importsOf(src: string): string[] {
  const out: string[] = [];
  for (const m of src.matchAll(/(?:import|export)\s[^'"]*?from\s*['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)|^import\s+['"]([^'"]+)['"]/gm)) {
    out.push((m[1] ?? m[2] ?? m[3])!);
  }
  return out;
}
