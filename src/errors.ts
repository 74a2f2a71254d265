/**
 * The one error catalogue. Every error the gateway answers with has a stable code here, its HTTP
 * status, ThingsBoard's errorCode (docs/api.md) and a default message. test/api/errors.test.ts fails when a code
 * is missing from README's error table.
 */
export const TB = {
  GENERAL: 2,
  AUTHENTICATION: 10,
  JWT_TOKEN_EXPIRED: 11,
  PERMISSION_DENIED: 20,
  INVALID_ARGUMENTS: 30,
  BAD_REQUEST_PARAMS: 31,
  ITEM_NOT_FOUND: 32,
  TOO_MANY_REQUESTS: 33,
} as const;

interface CatalogueEntry {
  readonly status: number;
  readonly tbCode: number;
  readonly message: string;
}

export const ERRORS = {
  BAD_JSON: { status: 400, tbCode: TB.BAD_REQUEST_PARAMS, message: 'Invalid JSON' },
  BAD_PAYLOAD: { status: 400, tbCode: TB.BAD_REQUEST_PARAMS, message: 'Invalid request body' },
  BAD_PARAM: { status: 400, tbCode: TB.BAD_REQUEST_PARAMS, message: 'Invalid request parameters' },
  NAME_INVALID: { status: 400, tbCode: TB.BAD_REQUEST_PARAMS, message: 'Validation error: invalid name' },
  INVALID_ARGUMENTS: { status: 400, tbCode: TB.INVALID_ARGUMENTS, message: 'Invalid arguments' },
  CREDENTIALS_INVALID: {
    status: 400,
    tbCode: TB.BAD_REQUEST_PARAMS,
    message: 'Invalid credentials body for simple mqtt credentials!',
  },
  CREDENTIALS_TAKEN: {
    status: 400,
    tbCode: TB.BAD_REQUEST_PARAMS,
    message: 'Device credentials are already assigned to another device!',
  },
  DEVICE_TOKEN_INVALID: { status: 401, tbCode: TB.AUTHENTICATION, message: 'Invalid device access token' },
  AUTH_FAILED: { status: 401, tbCode: TB.AUTHENTICATION, message: 'Authentication failed' },
  BAD_CREDENTIALS: { status: 401, tbCode: TB.AUTHENTICATION, message: 'Invalid username or password' },
  TOKEN_EXPIRED: { status: 401, tbCode: TB.JWT_TOKEN_EXPIRED, message: 'Token has expired' },
  PERMISSION_DENIED: {
    status: 403,
    tbCode: TB.PERMISSION_DENIED,
    message: "You don't have permission to perform this operation!",
  },
  NOT_FOUND: { status: 404, tbCode: TB.ITEM_NOT_FOUND, message: "Requested item wasn't found!" },
  ENTITY_NOT_FOUND: { status: 404, tbCode: TB.ITEM_NOT_FOUND, message: "Requested item wasn't found!" },
  PAYLOAD_TOO_LARGE: { status: 413, tbCode: TB.BAD_REQUEST_PARAMS, message: 'Payload size exceeds the limit' },
  TOO_MANY_REQUESTS: { status: 429, tbCode: TB.TOO_MANY_REQUESTS, message: 'Too many requests' },
  LOGIN_THROTTLED: { status: 429, tbCode: TB.TOO_MANY_REQUESTS, message: 'Too many failed logins; try again later' },
  SERVICE_UNAVAILABLE: { status: 503, tbCode: TB.GENERAL, message: 'Service is shutting down' },
  INTERNAL: { status: 500, tbCode: TB.GENERAL, message: 'Internal server error' },
  CONFIG_INVALID: { status: 500, tbCode: TB.GENERAL, message: 'Invalid configuration' },
  STORE_FAILED: { status: 500, tbCode: TB.GENERAL, message: 'Storage failure' },
  STORE_FULL: { status: 507, tbCode: TB.GENERAL, message: 'Storage is full' },
} as const satisfies Record<string, CatalogueEntry>;

export type ErrorCode = keyof typeof ERRORS;

export class OutpostError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly tbCode: number;
  /** seconds after which a retry may succeed: sent as the answer's Retry-After header */
  readonly retryAfterS: number | undefined;

  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown; retryAfterS?: number }) {
    const entry: CatalogueEntry = ERRORS[code];
    super(message ?? entry.message, options);
    this.name = 'OutpostError';
    this.code = code;
    this.status = entry.status;
    this.tbCode = entry.tbCode;
    this.retryAfterS = options?.retryAfterS;
  }
}

/** ThingsBoard's error JSON `{status,message,errorCode,timestamp}` (docs/api.md). */
export function errorBody(err: OutpostError, now: number = Date.now()): string {
  return JSON.stringify({ status: err.status, message: err.message, errorCode: err.tbCode, timestamp: now });
}

/** An error for the log: its message, then its cause's (a store failure's cause says what the disk said). */
export function describeError(err: unknown): string {
  const e = err as { message?: unknown; cause?: { message?: unknown } } | null;
  const cause = e?.cause?.message;
  return `${String(e?.message ?? err)}${typeof cause === 'string' ? `: ${cause}` : ''}`;
}

export function asOutpostError(err: unknown): OutpostError {
  if (err instanceof OutpostError) return err;
  return new OutpostError('INTERNAL', undefined, { cause: err });
}
