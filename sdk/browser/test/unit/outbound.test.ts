// Outbound link clicks.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fakeBrowser, link } from './fake.js';

const click = (page: ReturnType<typeof fakeBrowser>, target: unknown) => page.fireDocument('click', { target });

test('a click on a link to another host: an outbound event with url, text and target', () => {
  const page = fakeBrowser();
  page.start();
  click(page, link('https://partner.example/deal?id=7', '  Our\n partner  ', '_blank'));
  const [, outbound] = page.events();
  assert.equal(outbound!.type, 'outbound');
  assert.equal(outbound!.pathname, '/products/1', 'the page the link was on');
  assert.deepEqual(JSON.parse(outbound!.properties as string), {
    url: 'https://partner.example/deal?id=7',
    text: 'Our\n partner',
    target: '_blank',
  });
  assert.ok(!('event_name' in outbound!));
});

test('outbound: target defaults to _self; the text is cut to 200 characters', () => {
  const page = fakeBrowser();
  page.start();
  click(page, link('http://partner.example/', 'x'.repeat(5000)));
  const props = JSON.parse(page.events()[1]!.properties as string);
  assert.equal(props.target, '_self');
  assert.equal(props.text.length, 200);
});

test('not outbound: same host, mailto:, tel:, javascript:, a click outside any link', () => {
  const page = fakeBrowser();
  page.start();
  click(page, link('https://shop.example/other'));
  click(page, link('mailto:someone@partner.example'));
  click(page, link('tel:+441234567890'));
  click(page, link('javascript:void(0)'));
  click(page, { closest: () => null });
  click(page, null);
  click(page, {});
  assert.equal(page.events().length, 1);
});

test('data-track-outbound="false": no click listener at all', () => {
  const page = fakeBrowser({ attrs: { 'track-outbound': 'false' } });
  page.start();
  assert.equal(page.listeners.document.count('click'), 0);
});
