// The entry point for every runtime with fetch and Web Crypto (edge, workers, Deno or Bun
// when they do not pick the "node" condition). It imports nothing from node:*.
export { Tracker } from './tracker.js';
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

import { Tracker } from './tracker.js';
export default Tracker;
