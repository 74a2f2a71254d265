/**
 * What an entity name may be (docs/api.md): at most 255 UTF-16 code units, as ThingsBoard's `@Length` on names
 * and titles, and no control characters (C0, DEL, C1): names are shown to people and used as index keys. 255
 * code units are at most 765 bytes of UTF-8, well under LMDB's key size, so a name can never fail a write.
 */
import { OutpostError } from '../errors.js';

export const MAX_NAME_LENGTH = 255;

// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what is refused
const CONTROL = /[\x00-\x1f\x7f-\x9f]/;

/** Throws NAME_INVALID (400, TB errorCode 31) for a name that is too long or holds a control character. */
export function checkName(field: string, name: string): void {
  if (name.length > MAX_NAME_LENGTH)
    throw new OutpostError(
      'NAME_INVALID',
      `Validation error: ${field} length must be equal or less than ${MAX_NAME_LENGTH}`,
    );
  if (CONTROL.test(name))
    throw new OutpostError('NAME_INVALID', `Validation error: ${field} must not contain control characters`);
}

/** A free-text field stored beside a name (type, label): only its length is capped. */
export function checkLength(field: string, value: string | null | undefined): void {
  if (typeof value === 'string' && value.length > MAX_NAME_LENGTH)
    throw new OutpostError(
      'NAME_INVALID',
      `Validation error: ${field} length must be equal or less than ${MAX_NAME_LENGTH}`,
    );
}

/** Whether `key` can be looked up at all: longer ones name nothing (and would exceed LMDB's key size). */
export const lookupable = (key: string): boolean => key.length <= MAX_NAME_LENGTH;
