/**
 * ThingsBoard's Alarm and AlarmInfo JSON (docs/api.md "Alarms"): for the REST answers and for the CLI's local
 * mode, which prints the same bytes as the REST API.
 */
import { type AlarmRecord, alarmStatus } from '../../store/alarms.js';
import type { EntityRecord } from '../../store/entity-records.js';

const ref = (entityType: string, id: string | null) => (id === null ? null : { entityType, id });

/** TB's Alarm JSON */
export function alarmJson(a: AlarmRecord): Record<string, unknown> {
  return {
    id: { entityType: 'ALARM', id: a.id },
    createdTime: a.createdTime,
    tenantId: { entityType: 'TENANT', id: a.tenantId },
    customerId: ref('CUSTOMER', a.customerId),
    type: a.type,
    originator: { entityType: a.originator.entityType, id: a.originator.id },
    severity: a.severity,
    acknowledged: a.acknowledged,
    cleared: a.cleared,
    assigneeId: ref('USER', a.assigneeId),
    startTs: a.startTs,
    endTs: a.endTs,
    ackTs: a.ackTs,
    clearTs: a.clearTs,
    assignTs: a.assignTs,
    details: a.detailsJson === undefined ? null : (JSON.parse(a.detailsJson) as unknown),
    propagate: a.propagate,
    propagateToOwner: a.propagateToOwner,
    propagateToTenant: a.propagateToTenant,
    propagateRelationTypes: [...a.propagateRelationTypes],
    name: a.type,
    status: alarmStatus(a),
  };
}

function nameOf(rec: EntityRecord | undefined): string | null {
  if (rec === undefined) return null;
  if ('name' in rec) return rec.name;
  if ('title' in rec) return rec.title;
  return rec.email;
}

/** TB's AlarmInfo: the Alarm with its originator's name, label and display name, and its assignee */
export function alarmInfoJson(
  a: AlarmRecord,
  entity: (id: string) => EntityRecord | undefined,
): Record<string, unknown> {
  const o = entity(a.originator.id);
  const label = o !== undefined && 'label' in o ? o.label : null;
  const name = nameOf(o);
  const u = a.assigneeId === null ? undefined : entity(a.assigneeId);
  return {
    ...alarmJson(a),
    originatorName: name,
    originatorLabel: label,
    originatorDisplayName: label !== null && label !== '' ? label : name,
    assignee:
      u?.entityType === 'USER'
        ? { id: { entityType: 'USER', id: u.id }, firstName: u.firstName, lastName: u.lastName, email: u.email }
        : null,
  };
}
