/**
 * Loaded into a daemon with `NODE_OPTIONS=--import <this file's URL>` and OUTPOST_MODULE_LOG=<file>: every
 * module the process loads, at start or later by a dynamic import, is appended to that file as its URL, one a
 * line (test/daemon/modules-at-rest.test.ts). The hooks run on the loader's own thread (node:module register).
 */
import { register } from 'node:module';

if (process.env['OUTPOST_MODULE_LOG'] !== undefined) register(new URL('./module-probe-hooks.js', import.meta.url));
