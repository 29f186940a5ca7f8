export { Tracker } from './tracker.js';
export { TrackerError } from './errors.js';
export type { ServerErrorDetails, TrackerErrorCode } from './errors.js';
export type {
  BatchOptions,
  DropReason,
  EventProperties,
  Payload,
  PropertyScalar,
  PropertyValue,
  TrackerOptions,
  TrackerStats,
  WireEvent,
} from './types.js';

import { Tracker } from './tracker.js';
export default Tracker;
