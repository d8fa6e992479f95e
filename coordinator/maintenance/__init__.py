"""Maintenance workload: one service per file, each with its own interval, composed and
run in order by the maintainer (docs/design.md, "Maintenance"; the model is River's
`internal/maintenance/` and its `queue_maintainer.go`).

- `dead_letters.DeadLetterRecorder`: a dead letter's occurrence recorded `failed`, its
  reminder moved on.
- `claim_rescuer.ClaimRescuer`: reminders stuck in `claimed` re-driven.
- `delivery_rescuer.DeliveryRescuer`: `sending` rows nobody holds nor will retake ended.
- `webhook_rematcher.WebhookRematcher`: bounce and complaint events that beat the
  sender's commit matched again.
- `suppression_resumer.SuppressionResumer`: reminders paused by a suppression resumed
  once their address is no longer suppressed.
- `gauges.BacklogGauges`: the backlog gauges, computed once here rather than by every pod.
- `retention.Retention`: delivery_log partitions and expired rows.
"""
