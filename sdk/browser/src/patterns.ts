// Path patterns for data-skip-patterns and data-mask-patterns, with Rybbit's wildcards:
// `*` is one or more characters within a path segment, `**` any characters, `/` included.

/** A pattern as written, and the regular expression it compiles to. */
export type Pattern = [source: string, regExp: RegExp];

/**
 * The patterns of an attribute: comma-separated (`/admin/**, /drafts/*`) or, as Rybbit
 * writes them, a JSON array of strings (`["/admin/**","/drafts/*"]`). Brackets, quotes and
 * white space are dropped, which reads both forms alike: a path pattern has none of them.
 * Each is compiled to a regular expression anchored at both ends, with every other
 * character taken literally.
 */
export function parsePatterns(value: string | null): Pattern[] {
  return (value || '')
    .replace(/[[\]"\s]/g, '')
    .split(',')
    .filter(Boolean)
    .map((p) => [
      p,
      new RegExp(
        '^' +
          p.replace(/\*\*|\*|[.+?^${}()|[\]\\]/g, (m) => (m == '**' ? '.*' : m == '*' ? '[^/]+' : '\\' + m)) +
          '$',
      ),
    ]);
}

/** The first pattern (as written) that matches `path`, if any. */
export function firstMatch(path: string, patterns: Pattern[]): string | undefined {
  for (const [source, regExp] of patterns) if (regExp.test(path)) return source;
  return undefined;
}
