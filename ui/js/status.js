// Job statuses in lifecycle order (docs/api.md), and which are final. Their colours are
// app.css's .st-<status>, the same on every page. The dashboard shows the API's names (as
// the CLI does), each with a plain-words hint (docs/dashboard.md).
export const STATUSES = [
  'initial', 'pending', 'transmited', 'edge_transmitted', 'edge_started', 'edge_running',
  'terminated', 'edge_error', 'cancelled', 'expired',
];
export const TERMINAL = new Set(['terminated', 'edge_error', 'cancelled', 'expired']);
// The name shown: the API's own.
export const LABELS = Object.fromEntries(STATUSES.map((s) => [s, s]));
export const HINTS = {
  initial: 'created, not yet sent',
  pending: 'waiting to be sent (device away, scheduled, or held by the rollout)',
  transmited: 'sent to the device by the coordinator',
  edge_transmitted: 'received by the device',
  edge_started: 'started on the device',
  edge_running: 'running on the device',
  terminated: 'ended well',
  edge_error: 'ended with an error on the device',
  cancelled: 'cancelled before it ended',
  expired: 'not received within its time to live',
};
// Groups of a rollout (when the coordinator reports them)
export const GROUP_STATUSES = ['running', 'paused', 'completed', 'aborted', 'cancelled'];
