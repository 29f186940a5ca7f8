// The entry point of script.js: starts tracking as its own <script> tag asks. (A module
// script, or code run later, has no current script: then the script does nothing.)
import { start } from './tracker.js';

start(window, document.currentScript as HTMLScriptElement | null);
