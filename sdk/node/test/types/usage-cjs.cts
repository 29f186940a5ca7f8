// The same package as seen by a CommonJS TypeScript project (the "require" types).
import rivulet = require('rivulet-node');

const tracker = new rivulet.Tracker({ analyticsHost: 'http://127.0.0.1:3000/api', siteId: '1', apiKey: 'rb_abc' });
void tracker.event('signup', { user_id: 'u1' }, { plan: 'pro' });
void tracker.identify('u1', { plan: 'pro', removed: null }, { anonymousId: 'anon-1' });
const traits: rivulet.Traits = { plan: 'pro' };
void traits;
const viaDefault: typeof rivulet.Tracker = rivulet.default;
void viaDefault;
// @ts-expect-error eventName is required
void tracker.event();
// The brand-based check works on the CommonJS side too.
const maybe: unknown = new Error('x');
if (rivulet.isTrackerError(maybe)) void maybe.code;
