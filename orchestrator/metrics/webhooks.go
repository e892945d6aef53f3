package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// The lifecycle webhooks' series, per endpoint (a name from sandboxd's
// --webhooks file: their number is the operator's), read at scrape time
// (WatchWebhooks).
const (
	WebhookDeliveredName = "webhook_events_delivered_total"
	WebhookFailuresName  = "webhook_delivery_failures_total"
	WebhookDroppedName   = "webhook_events_dropped_total"
	WebhookQueuedName    = "webhook_events_queued"
)

// WebhookSource is what the webhook series read: *webhooks.Dispatcher.
type WebhookSource interface {
	WebhookStats() []core.WebhookStats
}

// WatchWebhooks registers the webhooks' series, read from src at scrape
// time.
func (m *Metrics) WatchWebhooks(src WebhookSource) {
	m.reg.MustRegister(&webhookCollector{src: src})
}

var (
	webhookDeliveredDesc = prometheus.NewDesc(Name(WebhookDeliveredName),
		"Lifecycle events an endpoint answered with 2xx since sandboxd started.", []string{"endpoint"}, nil)
	webhookFailuresDesc = prometheus.NewDesc(Name(WebhookFailuresName),
		"Delivery attempts to an endpoint that failed (an error, a timeout or a non-2xx answer) and will be retried, since sandboxd started.", []string{"endpoint"}, nil)
	webhookDroppedDesc = prometheus.NewDesc(Name(WebhookDroppedName),
		"Lifecycle events dropped undelivered since sandboxd started, by reason: queue_full (the oldest, past the endpoint's max_queue) or expired (older than --webhook-max-age).", []string{"endpoint", "reason"}, nil)
	webhookQueuedDesc = prometheus.NewDesc(Name(WebhookQueuedName),
		"Lifecycle events waiting for an endpoint now (in the durable queue).", []string{"endpoint"}, nil)
)

type webhookCollector struct {
	src WebhookSource
}

// Describe implements prometheus.Collector.
func (c *webhookCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{webhookDeliveredDesc, webhookFailuresDesc, webhookDroppedDesc, webhookQueuedDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *webhookCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.src.WebhookStats() {
		ch <- prometheus.MustNewConstMetric(webhookDeliveredDesc, prometheus.CounterValue, float64(s.Delivered), s.Endpoint)
		ch <- prometheus.MustNewConstMetric(webhookFailuresDesc, prometheus.CounterValue, float64(s.Failures), s.Endpoint)
		ch <- prometheus.MustNewConstMetric(webhookDroppedDesc, prometheus.CounterValue, float64(s.DroppedFull), s.Endpoint, "queue_full")
		ch <- prometheus.MustNewConstMetric(webhookDroppedDesc, prometheus.CounterValue, float64(s.DroppedExpired), s.Endpoint, "expired")
		ch <- prometheus.MustNewConstMetric(webhookQueuedDesc, prometheus.GaugeValue, float64(s.Queued), s.Endpoint)
	}
}
