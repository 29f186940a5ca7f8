// The entry point for Node.js, Bun and Deno (the "node" export condition): the same API as
// index.ts, with Node's crypto and zlib under the tracker.
import { nodePlatform } from './platform-node.js';
import { Tracker as CoreTracker } from './tracker.js';
import type { TrackerOptions } from './types.js';

export { TrackerError, isTrackerError } from './errors.js';
export type { ServerErrorDetails, TrackerErrorCode } from './errors.js';
export { VERSION } from './version.js';
export type {
  BatchOptions,
  CompressOptions,
  DropReason,
  EventProperties,
  FetchFunction,
  Payload,
  PropertyScalar,
  PropertyValue,
  TrackerOptions,
  TrackerStats,
  WireEvent,
} from './types.js';

/** Sends pageviews and custom events to a Rivulet ingest server (see the README). */
export class Tracker extends CoreTracker {
  constructor(options: TrackerOptions) {
    super(options, nodePlatform);
  }
}
export default Tracker;
