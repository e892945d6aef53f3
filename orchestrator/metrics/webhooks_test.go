package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

type fakeWebhooks []core.WebhookStats

func (f fakeWebhooks) WebhookStats() []core.WebhookStats { return f }

// TestWebhookSeries: each endpoint's deliveries, failures, drops by reason
// and queue, as a scrape sees them.
func TestWebhookSeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	New(reg).WatchWebhooks(fakeWebhooks{
		{Endpoint: "billing", Queued: 3, Delivered: 10, Failures: 2, DroppedFull: 1, DroppedExpired: 4},
		{Endpoint: "audit"},
	})
	want := `
# HELP sandboxd_webhook_events_dropped_total Lifecycle events dropped undelivered since sandboxd started, by reason: queue_full (the oldest, past the endpoint's max_queue) or expired (older than --webhook-max-age).
# TYPE sandboxd_webhook_events_dropped_total counter
sandboxd_webhook_events_dropped_total{endpoint="audit",reason="expired"} 0
sandboxd_webhook_events_dropped_total{endpoint="audit",reason="queue_full"} 0
sandboxd_webhook_events_dropped_total{endpoint="billing",reason="expired"} 4
sandboxd_webhook_events_dropped_total{endpoint="billing",reason="queue_full"} 1
# HELP sandboxd_webhook_events_queued Lifecycle events waiting for an endpoint now (in the durable queue).
# TYPE sandboxd_webhook_events_queued gauge
sandboxd_webhook_events_queued{endpoint="audit"} 0
sandboxd_webhook_events_queued{endpoint="billing"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Name(WebhookDroppedName), Name(WebhookQueuedName)); err != nil {
		t.Error(err)
	}
	want = `
# HELP sandboxd_webhook_events_delivered_total Lifecycle events an endpoint answered with 2xx since sandboxd started.
# TYPE sandboxd_webhook_events_delivered_total counter
sandboxd_webhook_events_delivered_total{endpoint="audit"} 0
sandboxd_webhook_events_delivered_total{endpoint="billing"} 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), Name(WebhookDeliveredName)); err != nil {
		t.Error(err)
	}
}
