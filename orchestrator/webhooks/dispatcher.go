package webhooks

import (
	"bytes"
	"context"
	"crypto/rand"
	base32pkg "encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jellydator/ttlcache/v3"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

var (
	base64Std = base64.StdEncoding
	base32    = base32pkg.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32pkg.NoPadding)
)

// Defaults of Config.
const (
	DefaultTimeout = 10 * time.Second
	DefaultMaxAge  = 24 * time.Hour
	// QueueFile is the queue's file name in the state directory.
	QueueFile = "webhooks.db"
	// maxAnswerBytes bounds what is read of a receiver's answer (to reuse
	// the connection); the rest is not read.
	maxAnswerBytes = 64 << 10
	// seenIDs is how long an event ID given by the backend (command.finished)
	// is remembered, so that a command's end read twice is queued once.
	seenIDs = 10 * time.Minute
)

// Config configures a Dispatcher.
type Config struct {
	// StateDir holds the queue (QueueFile). Required.
	StateDir string
	// Endpoints are the receivers, as LoadFile or Check returned them.
	Endpoints []Endpoint
	// Timeout bounds one attempt (connect, send, answer); default
	// DefaultTimeout.
	Timeout time.Duration
	// MaxAge is how long an event is tried before it is dropped; default
	// DefaultMaxAge.
	MaxAge time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts; default
	// half a second and a minute.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives delivery problems; default slog.Default().
	Logger *slog.Logger
	// Transport sends the requests; default a clone of
	// http.DefaultTransport.
	Transport http.RoundTripper
}

// Dispatcher queues lifecycle events and delivers them: it is the
// core.LifecycleSink sandboxd gives its backend.
type Dispatcher struct {
	cfg    Config
	q      *queue
	eps    []*endpoint
	log    *slog.Logger
	client *http.Client
	seen   *ttlcache.Cache[string, struct{}]
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// endpoint is an Endpoint with its delivery loop's state.
type endpoint struct {
	Endpoint
	wh     *standardwebhooks.Webhook
	wake   chan struct{}     // a new event is queued
	stats  core.WebhookStats // guarded by mu
	mu     sync.Mutex
	logged atomic.Int64 // drops logged, to log one in a hundred
}

// Open opens the queue in cfg.StateDir and starts one delivery loop per
// endpoint; events queued before (by a sandboxd that stopped or crashed)
// are delivered first. Queues of endpoints no longer configured are
// removed, and their events logged as dropped.
func Open(cfg Config) (*Dispatcher, error) {
	if cfg.StateDir == "" {
		return nil, errors.New("webhooks: StateDir is required")
	}
	if err := Check(cfg.Endpoints); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 500 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(time.Minute, cfg.MinBackoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	q, err := openQueue(filepath.Join(cfg.StateDir, QueueFile))
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		cfg: cfg, q: q, log: cfg.Logger.With("component", "webhooks"),
		client: &http.Client{
			Transport: cfg.Transport,
			Timeout:   cfg.Timeout,
			// The operator's URL is the only one sent to.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		seen: ttlcache.New(ttlcache.WithTTL[string, struct{}](seenIDs), ttlcache.WithCapacity[string, struct{}](100000),
			ttlcache.WithDisableTouchOnHit[string, struct{}]()),
	}
	names := make([]string, 0, len(cfg.Endpoints))
	for _, e := range cfg.Endpoints {
		wh, err := standardwebhooks.NewWebhook(e.Secret)
		if err != nil {
			q.close()
			return nil, fmt.Errorf("endpoint %q: %w", e.Name, err)
		}
		d.eps = append(d.eps, &endpoint{Endpoint: e, wh: wh, wake: make(chan struct{}, 1), stats: core.WebhookStats{Endpoint: e.Name}})
		names = append(names, e.Name)
	}
	removed, err := q.keep(names)
	if err != nil {
		q.close()
		return nil, fmt.Errorf("webhooks queue: %w", err)
	}
	for name, n := range removed {
		d.log.Warn("dropped the queue of an endpoint no longer configured", "endpoint", name, "events", n)
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	go d.seen.Start()
	for _, ep := range d.eps {
		d.wg.Add(1)
		go d.deliver(ep)
	}
	return d, nil
}

// Close stops delivery (an attempt in progress is abandoned: its event
// stays queued, to be sent again at the next start) and closes the queue.
func (d *Dispatcher) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	d.cancel()
	d.wg.Wait()
	d.seen.Stop()
	return d.q.close()
}

// payload is a request's body: the Standard Webhooks shape (type,
// timestamp, data).
type payload struct {
	Type      core.LifecycleKind `json:"type"`
	Timestamp time.Time          `json:"timestamp"`
	Data      payloadData        `json:"data"`
}

type payloadData struct {
	EventID   string            `json:"event_id"`
	Tenant    string            `json:"tenant"`
	SandboxID string            `json:"sandbox_id"`
	UserID    string            `json:"user_id,omitempty"`
	Metadata  map[string]string `json:"metadata,omitempty"`
	Reason    string            `json:"reason,omitempty"`
	Command   *payloadCommand   `json:"command,omitempty"`
}

type payloadCommand struct {
	CommandID string `json:"command_id"`
	Status    string `json:"status"`
	ExitCode  *int   `json:"exit_code,omitempty"`
}

// Publish queues e for every endpoint that wants it, and returns once it
// is committed to the queue: it waits on the local disk, never on a
// receiver. A queue that cannot be written loses the event, and says so
// in the log.
func (d *Dispatcher) Publish(e core.LifecycleEvent) {
	if d.closed.Load() {
		return
	}
	var to []*endpoint
	for _, ep := range d.eps {
		if ep.wants(e.Kind, e.Tenant) {
			to = append(to, ep)
		}
	}
	if len(to) == 0 {
		return
	}
	id := e.ID
	if id != "" {
		if _, found := d.seen.GetOrSet(id, struct{}{}); found {
			return // the same change, read again
		}
	} else {
		id = newEventID()
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	p := payload{Type: e.Kind, Timestamp: e.Time.UTC(), Data: payloadData{
		EventID: id, Tenant: e.Tenant, SandboxID: e.SandboxID, UserID: e.UserID, Metadata: e.Metadata, Reason: e.Reason,
	}}
	if c := e.Command; c != nil {
		p.Data.Command = &payloadCommand{CommandID: c.CommandID, Status: c.Status, ExitCode: c.ExitCode}
	}
	body, err := json.Marshal(p)
	if err != nil {
		d.log.Error("encode event; dropped", "event_id", id, "error", err)
		return
	}
	dropped, err := d.q.push(record{ID: id, Type: string(e.Kind), Sandbox: e.SandboxID, Created: time.Now(), Body: body}, to)
	if err != nil {
		d.log.Error("queue event; dropped", "event_id", id, "type", e.Kind, "sandbox_id", e.SandboxID, "error", err)
		return
	}
	for _, ep := range to {
		for _, r := range dropped[ep.Name] {
			ep.dropped(d.log, r, "queue full", &ep.stats.DroppedFull)
		}
		select {
		case ep.wake <- struct{}{}:
		default:
		}
	}
}

// dropped counts and logs (one in a hundred) an event dropped for why.
func (ep *endpoint) dropped(log *slog.Logger, r record, why string, counter *uint64) {
	ep.mu.Lock()
	*counter++
	ep.mu.Unlock()
	if n := ep.logged.Add(1); n%100 == 1 {
		log.Warn("event dropped", "endpoint", ep.Name, "why", why, "event_id", r.ID, "type", r.Type,
			"sandbox_id", r.Sandbox, "drops_so_far", n)
	}
}

// deliver is ep's loop: send the head until a receiver takes it, then
// the next; wait for an event when the queue is empty.
func (d *Dispatcher) deliver(ep *endpoint) {
	defer d.wg.Done()
	bo := &backoff.ExponentialBackOff{
		InitialInterval: d.cfg.MinBackoff, MaxInterval: d.cfg.MaxBackoff,
		RandomizationFactor: 0.2, Multiplier: 2,
	}
	for {
		rec, key, ok, err := d.q.head(ep.Name)
		if err != nil {
			d.log.Error("read the queue", "endpoint", ep.Name, "error", err)
			if !d.sleep(time.Second) {
				return
			}
			continue
		}
		if !ok {
			select {
			case <-ep.wake:
				continue
			case <-d.ctx.Done():
				return
			}
		}
		if time.Since(rec.Created) > d.cfg.MaxAge {
			ep.dropped(d.log, rec, fmt.Sprintf("not delivered within %v", d.cfg.MaxAge), &ep.stats.DroppedExpired)
			d.removeHead(ep, key)
			continue
		}
		err = d.send(ep, rec)
		if d.ctx.Err() != nil {
			return // abandoned at Close: sent again at the next start
		}
		if err == nil {
			ep.mu.Lock()
			ep.stats.Delivered++
			ep.stats.LastError = ""
			ep.mu.Unlock()
			d.removeHead(ep, key)
			bo.Reset()
			continue
		}
		wait := bo.NextBackOff()
		ep.mu.Lock()
		ep.stats.Failures++
		ep.stats.LastError = err.Error()
		failures := ep.stats.Failures
		ep.mu.Unlock()
		d.log.Warn("webhook delivery failed; will retry", "endpoint", ep.Name, "event_id", rec.ID, "type", rec.Type,
			"error", err, "retry_in", wait.Round(time.Millisecond), "failures_so_far", failures)
		if !d.sleep(wait) {
			return
		}
	}
}

// removeHead removes a delivered or dropped head; a queue that cannot be
// written is retried (the event would otherwise be sent again).
func (d *Dispatcher) removeHead(ep *endpoint, key uint64) {
	for {
		err := d.q.remove(ep.Name, key)
		if err == nil {
			return
		}
		d.log.Error("remove a delivered event from the queue", "endpoint", ep.Name, "error", err)
		if !d.sleep(time.Second) {
			return
		}
	}
}

// sleep waits for d, or Close; false at Close.
func (d *Dispatcher) sleep(wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-d.ctx.Done():
		return false
	}
}

// send makes one attempt: POST the body, signed now; nil on a 2xx answer.
func (d *Dispatcher) send(ep *endpoint, rec record) error {
	now := time.Now()
	sig, err := ep.wh.Sign(rec.ID, now, rec.Body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(d.ctx, http.MethodPost, ep.URL, bytes.NewReader(rec.Body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandboxd-webhooks/1")
	req.Header.Set(standardwebhooks.HeaderWebhookID, rec.ID)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// WebhookStats returns each endpoint's counters and queue length, in the
// configuration's order.
func (d *Dispatcher) WebhookStats() []core.WebhookStats {
	out := make([]core.WebhookStats, 0, len(d.eps))
	for _, ep := range d.eps {
		ep.mu.Lock()
		s := ep.stats
		ep.mu.Unlock()
		if !d.closed.Load() {
			s.Queued = d.q.length(ep.Name)
		}
		out = append(out, s)
	}
	return out
}

// newEventID is a new random event ID: "evt_" and 26 base32 characters.
func newEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "evt_" + base32.EncodeToString(b[:])
}
