// Package webhooks sends sandboxes' lifecycle events (core.LifecycleKind:
// created, hibernated, woken, killed, expired, died, command.finished) to
// the HTTP endpoints an operator registers per tenant (sandboxd
// --webhooks FILE).
//
// # Guarantees
//
//   - Signed: each request carries the Standard Webhooks headers
//     (webhook-id, webhook-timestamp, webhook-signature: "v1," and the
//     base64 HMAC-SHA256 of "<id>.<timestamp>.<body>" under the endpoint's
//     secret). The timestamp is the attempt's, so a receiver that refuses
//     old timestamps refuses replays and still accepts retries.
//   - At least once, in order per endpoint: each endpoint has a FIFO queue;
//     its head is sent until a 2xx answer, then removed. Later events wait
//     behind it, so a receiver sees each sandbox's events in the order they
//     happened. A receiver deduplicates by webhook-id.
//   - Durable: the queues live in one bbolt file in the state directory
//     (STATE_DIR/webhooks.db); an event is committed (fsync) before Publish
//     returns, so a crash or restart of sandboxd loses nothing queued.
//   - Never in the way: Publish writes to the local queue and returns; a
//     slow, hanging or failing endpoint delays only its own queue, never a
//     sandbox operation nor another endpoint.
//   - Bounded: an endpoint's queue holds at most its max_queue events; past
//     it the oldest is dropped. An event older than the maximum age
//     (sandboxd --webhook-max-age) is dropped instead of being sent. Both
//     are counted (sandboxd_webhook_events_dropped_total, by reason) and
//     logged.
//
// Retries back off exponentially from half a second to a minute between
// attempts, each attempt bounded (sandboxd --webhook-timeout). A redirect
// is a failure: the operator's URL is the only one sent to.
package webhooks
