// Uncaught errors and unhandled rejections.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fakeBrowser } from './fake.js';

const errorEvents = (page: ReturnType<typeof fakeBrowser>) => page.events().filter((e) => e.type == 'error');

test('an uncaught TypeError: event_name is its type, properties say where it was', () => {
  const page = fakeBrowser();
  page.start();
  const error = new TypeError("Cannot read properties of undefined (reading 'x')");
  page.fireWindow('error', {
    error,
    message: "Uncaught TypeError: Cannot read properties of undefined (reading 'x')",
    filename: 'https://shop.example/app.js',
    lineno: 12,
    colno: 34,
  });
  const [event] = errorEvents(page);
  assert.equal(event!.event_name, 'TypeError');
  assert.equal(event!.pathname, '/products/1');
  assert.deepEqual(JSON.parse(event!.properties as string), {
    message: "Cannot read properties of undefined (reading 'x')",
    stack: error.stack,
    fileName: 'https://shop.example/app.js',
    lineNumber: 12,
    columnNumber: 34,
  });
});

test('a cross-origin "Script error." (no error object): the event message, type Error', () => {
  const page = fakeBrowser();
  page.start();
  page.fireWindow('error', { error: null, message: 'Script error.', filename: '', lineno: 0, colno: 0 });
  const [event] = errorEvents(page);
  assert.equal(event!.event_name, 'Error');
  assert.equal(JSON.parse(event!.properties as string).message, 'Script error.');
});

test('unhandled rejections: of an Error, and of a plain value', () => {
  const page = fakeBrowser();
  page.start();
  class PaymentError extends Error {
    override name = 'PaymentError';
  }
  page.fireWindow('unhandledrejection', { reason: new PaymentError('card declined') });
  page.fireWindow('unhandledrejection', { reason: 'timeout' });
  page.fireWindow('unhandledrejection', { reason: undefined });
  const [first, second, third] = errorEvents(page);
  assert.equal(first!.event_name, 'PaymentError');
  const props = JSON.parse(first!.properties as string);
  assert.equal(props.message, 'card declined');
  assert.match(props.stack, /PaymentError: card declined/);
  assert.ok(!('fileName' in props));
  assert.equal(second!.event_name, 'Error');
  assert.deepEqual(JSON.parse(second!.properties as string), { message: 'timeout' });
  assert.equal(third!.event_name, 'Error');
  assert.equal(JSON.parse(third!.properties as string).message, 'Error', 'a message is always given');
});

test('huge errors: the properties fit in 4096 characters, the stack cut first', () => {
  const page = fakeBrowser();
  page.start();
  const error = new Error('m'.repeat(1000));
  error.stack = '    at render (https://shop.example/assets/app.js:1:2345)\n'.repeat(500);
  page.fireWindow('error', { error, message: 'x', filename: 'https://shop.example/app.js', lineno: 1, colno: 2 });
  const huge = new RangeError('é"'.repeat(5000));
  huge.stack = undefined;
  page.fireWindow('error', { error: huge });
  const [first, second] = errorEvents(page);
  const one = first!.properties as string;
  assert.ok(one.length <= 4096, `${one.length}`);
  const parsed = JSON.parse(one);
  assert.equal(parsed.message, 'm'.repeat(1000), 'the message is whole while the stack can give way');
  assert.ok(one.length > 4000, `${one.length}: the stack keeps the room there is`);
  assert.ok(error.stack.startsWith(parsed.stack), 'the stack is cut at its end');
  assert.equal(parsed.lineNumber, 1);
  const two = second!.properties as string;
  assert.ok(two.length <= 4096, `${two.length}`);
  assert.ok(two.length > 4000, `${two.length}: escapes do not make it cut the message to nothing`);
  assert.match(JSON.parse(two).message, /^(é")+é?$/);
  assert.equal(second!.event_name, 'RangeError');
});

test('at most 10 errors per page load', () => {
  const page = fakeBrowser();
  page.start();
  for (let i = 0; i < 25; i++) page.fireWindow('error', { error: new Error(`e${i}`) });
  for (let i = 0; i < 5; i++) page.fireWindow('unhandledrejection', { reason: new Error(`r${i}`) });
  const events = errorEvents(page);
  assert.equal(events.length, 10);
  assert.equal(JSON.parse(events[9]!.properties as string).message, 'e9');
});

test('data-track-errors="false": no listener at all', () => {
  const page = fakeBrowser({ attrs: { 'track-errors': 'false' } });
  page.start();
  assert.equal(page.listeners.window.count('error'), 0);
  assert.equal(page.listeners.window.count('unhandledrejection'), 0);
});
