/**
 * A connection's machinery: the codec (mqtt-packet, with readable-stream and debug under it: ~0.9 MiB of V8 heap)
 * and the device session. listener.ts imports it on the first connection, so a gateway that no MQTT device
 * connects to does not hold it (docs/design/memory-budget.md).
 */
export { MqttConnection, ParserPool } from './connection.js';
export { MqttSession } from './device-session.js';
