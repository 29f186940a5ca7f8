// The pure parts: patterns, pages, text limits.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { firstMatch, parsePatterns } from '../../src/patterns.js';
import { pageKey, pageOf } from '../../src/page.js';
import { cut, fitJson } from '../../src/text.js';

const matches = (pattern: string, path: string) => firstMatch(path, parsePatterns(pattern)) === pattern;

test('patterns: * stays within a segment, ** crosses them', () => {
  assert.ok(matches('/admin/*', '/admin/users'));
  assert.ok(!matches('/admin/*', '/admin/users/5'));
  assert.ok(!matches('/admin/*', '/admin/'), '* is one character or more');
  assert.ok(matches('/admin/**', '/admin/users/5/edit'));
  assert.ok(!matches('/admin/**', '/administrator'));
  assert.ok(matches('/blog/*/comments', '/blog/post-1/comments'));
  assert.ok(!matches('/blog/*/comments', '/blog/a/b/comments'));
  assert.ok(matches('/users/*/settings', '/users/42/settings'));
  assert.ok(matches('/exact', '/exact'));
  assert.ok(!matches('/exact', '/exact/more'), 'anchored at the end');
  assert.ok(!matches('/exact', '/not/exact'), 'anchored at the start');
});

test('patterns: every other character is literal', () => {
  assert.ok(matches('/a.b', '/a.b'));
  assert.ok(!matches('/a.b', '/aXb'));
  assert.ok(matches('/(x)+$', '/(x)+$'));
  assert.ok(matches('/p?q', '/p?q'));
  assert.ok(!matches('/p?q', '/q'));
});

test('patterns: comma-separated or a JSON array (Rybbit), white space ignored', () => {
  const sources = (value: string | null) => parsePatterns(value).map(([source]) => source);
  assert.deepEqual(sources('/admin/**, /drafts/*'), ['/admin/**', '/drafts/*']);
  assert.deepEqual(sources('["/admin/**", "/drafts/*"]'), ['/admin/**', '/drafts/*']);
  assert.deepEqual(sources(' /a ,, /b, '), ['/a', '/b']);
  assert.deepEqual(sources(''), []);
  assert.deepEqual(sources(null), []);
  assert.equal(firstMatch('/drafts/x', parsePatterns('/admin/**,/drafts/*')), '/drafts/*', 'the pattern that matched');
  assert.equal(firstMatch('/other', parsePatterns('/admin/**')), undefined);
});

test('pages: the path and query, a hash route standing for them, other hashes ignored', () => {
  const at = (href: string) => new URL(href);
  assert.deepEqual(pageOf(at('https://x.example/a/b?c=1#top')), { path: '/a/b', query: '?c=1' });
  assert.deepEqual(pageOf(at('https://x.example/#/users/5?tab=2')), { path: '/users/5', query: '?tab=2' });
  assert.deepEqual(pageOf(at('https://x.example/?utm=1#/users/5')), { path: '/users/5', query: '?utm=1' });
  assert.deepEqual(pageOf(at('https://x.example/app#section')), { path: '/app', query: '' });
  assert.equal(pageKey(at('https://x.example/a?b=1#one')), pageKey(at('https://x.example/a?b=1#two')));
  assert.notEqual(pageKey(at('https://x.example/a?b=1')), pageKey(at('https://x.example/a?b=2')));
  assert.notEqual(pageKey(at('https://x.example/#/a')), pageKey(at('https://x.example/#/b')));
});

test('cut: at most max UTF-16 units, never half a surrogate pair', () => {
  assert.equal(cut('abcdef', 3), 'abc');
  assert.equal(cut('abc', 3), 'abc');
  assert.equal(cut('ab😀', 3), 'ab', 'the pair would be cut in half: dropped');
  assert.equal(cut('ab😀', 4), 'ab😀');
  assert.equal(cut('abc', -2), '', 'a negative max keeps nothing');
});

test('fitJson: shortens the named fields in order until the JSON fits', () => {
  const small = { message: 'm', stack: 's' };
  assert.equal(fitJson({ ...small }, 100, ['stack']), JSON.stringify(small));

  const o = { message: 'x'.repeat(50), stack: 'y'.repeat(200) };
  const json = fitJson(o, 120, ['stack', 'message']);
  assert.equal(json.length, 120);
  const back = JSON.parse(json);
  assert.equal(back.message, 'x'.repeat(50), 'the message is kept while cutting the stack is enough');
  assert.ok(back.stack.length > 0 && back.stack.length < 200);

  // Escapes count: quotes and newlines take two characters in JSON.
  const quoted = fitJson({ message: '"'.repeat(300), stack: '\n'.repeat(300) }, 200, ['stack', 'message']);
  assert.ok(quoted.length <= 200, `${quoted.length} > 200`);
  assert.equal(JSON.parse(quoted).stack, '');

  // Emoji cut in half would leave a lone surrogate, which ingest rejects.
  const emoji = fitJson({ message: '😀'.repeat(100) }, 51, ['message']);
  assert.ok(emoji.length <= 51);
  assert.doesNotMatch(emoji, /[\ud800-\udbff](?![\udc00-\udfff])/);
});
