/**
 * What a LAN transport is handed of the daemon: its config, the log, and the device layer
 * (src/device/actions.ts), through which it does everything else.
 */
import type { Services } from '../context.js';

export type TransportServices = Pick<Services, 'config' | 'log' | 'devices'>;
