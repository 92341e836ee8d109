// Job statuses in lifecycle order (docs/api.md), and which are final. Their colours are
// app.css's .st-<status>, the same on every page.
export const STATUSES = [
  'initial', 'pending', 'transmited', 'edge_transmitted', 'edge_started', 'edge_running',
  'terminated', 'edge_error', 'cancelled', 'expired',
];
export const TERMINAL = new Set(['terminated', 'edge_error', 'cancelled', 'expired']);
export const LABELS = {
  initial: 'initial',
  pending: 'pending',
  transmited: 'transmitted',
  edge_transmitted: 'on device',
  edge_started: 'started',
  edge_running: 'running',
  terminated: 'terminated',
  edge_error: 'error',
  cancelled: 'cancelled',
  expired: 'expired',
};
// Groups of a rollout (when the coordinator reports them)
export const GROUP_STATUSES = ['running', 'paused', 'completed', 'aborted', 'cancelled'];
