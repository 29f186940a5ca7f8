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
  DropCallback,
  DropReason,
  EventProperties,
  FetchFunction,
  IdentifyOptions,
  Payload,
  PropertyScalar,
  PropertyValue,
  TrackerOptions,
  TrackerStats,
  Traits,
  TraitValue,
  WireEvent,
  WireIdentify,
} from './types.js';

/** Sends pageviews, custom events and identify calls to a Rivulet ingest server (see the README). */
export class Tracker extends CoreTracker {
  constructor(options: TrackerOptions) {
    super(options, nodePlatform);
  }
}
export default Tracker;
