package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The webhook figures: what lifecycle webhooks cost the calls that cause
// them. A user's round (acquire a new sandbox, run "1", delete it) makes
// three events (created, command.finished, killed); its p50 is measured
// with webhooks off, then with one endpoint (a receiver on loopback)
// answering at once, then with it hanging every request, all in this run.
var (
	mHookOK   = metric{"webhook_round_answering", "acquire + run + delete, a webhook endpoint answering (p50)", "ms", true, "faster", "slower"}
	mHookHung = metric{"webhook_round_hanging", "acquire + run + delete, a webhook endpoint hanging (p50)", "ms", true, "faster", "slower"}
)

// hookSink is the benchmark's webhook endpoint: it counts requests, and
// while hanging holds each until released.
type hookSink struct {
	mu      sync.Mutex
	hang    bool
	release chan struct{}
	got     int
	held    int
}

func (h *hookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.got++
	hang, release := h.hang, h.release
	if hang {
		h.held++
	}
	h.mu.Unlock()
	if hang {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookSink) counts() (got, held int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got, h.held
}

// webhooks measures the rounds with webhooks off, answering and hanging,
// restarting the self-started sandboxd for each, and leaves it as it was.
func (b *bench) webhooks(ctx context.Context) error {
	if b.d == nil {
		note := "not measured: needs a self-started sandboxd (no --addr), which it restarts with --webhooks"
		b.rep.add(row(mHookOK, nan, "", nan, nil, note))
		b.rep.add(row(mHookHung, nan, "", nan, nil, note))
		return nil
	}
	fail := func(err error) error {
		b.fail(err, mHookOK, mHookHung)
		return err
	}
	sink := &hookSink{release: make(chan struct{})}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	defer func() {
		sink.mu.Lock()
		if sink.hang {
			close(sink.release)
			sink.hang = false
		}
		sink.mu.Unlock()
	}()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return fail(err)
	}
	file := filepath.Join(b.tmp, "webhooks.json")
	body, _ := json.Marshal(map[string]any{"endpoints": []map[string]any{{
		"name": "bench", "url": srv.URL + "/hook", "secret": "whsec_" + base64.StdEncoding.EncodeToString(key),
		"events": []string{"created", "hibernated", "woken", "killed", "expired", "died", "command.finished"},
	}}})
	if err := os.WriteFile(file, body, 0o600); err != nil {
		return fail(err)
	}
	rounds := func(tag string) (time.Duration, error) {
		var l latencies
		for i := range b.cfg.WebhookRounds + 1 {
			start := time.Now()
			id, err := b.c.acquire(ctx, b.user(fmt.Sprintf("hook-%s-%d", tag, i)), nil)
			if err != nil {
				return 0, err
			}
			if _, err := b.c.exec(ctx, id, "python", "1"); err != nil {
				return 0, err
			}
			if err := b.c.delete(ctx, id); err != nil {
				return 0, err
			}
			if i > 0 { // the first warms the image's page cache
				l = append(l, time.Since(start))
			}
		}
		return l.percentile(50), nil
	}
	off, err := rounds("off")
	if err != nil {
		return fail(err)
	}
	if err := b.restartWith(ctx, "--webhooks", file, "--webhook-timeout", "10m"); err != nil {
		return fail(err)
	}
	defer func() {
		if err := b.restartWith(context.WithoutCancel(ctx)); err != nil {
			b.errs = append(b.errs, fmt.Errorf("restart sandboxd without webhooks: %w", err))
		}
	}()
	answering, err := rounds("ok")
	if err != nil {
		return fail(err)
	}
	// Every event of the answering rounds arrives (each endpoint's queue is
	// in order, so the count says all).
	want := 3 * (b.cfg.WebhookRounds + 1)
	deadline := time.Now().Add(time.Minute)
	for got, _ := sink.counts(); got < want; got, _ = sink.counts() {
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("the webhook endpoint got %d of the answering rounds' %d events within a minute", got, want))
		}
		time.Sleep(20 * time.Millisecond) // polling a counter, bounded by the deadline
	}
	sink.mu.Lock()
	sink.hang = true
	sink.mu.Unlock()
	hanging, err := rounds("hung")
	if err != nil {
		return fail(err)
	}
	if _, held := sink.counts(); held == 0 {
		return fail(errors.New("the hanging endpoint was sent nothing during the hanging rounds"))
	}
	note := fmt.Sprintf("%d rounds each after one untimed; one endpoint on loopback getting created, command.finished and killed of each; --webhook-timeout 10m, so the hanging endpoint holds its first request through all the rounds", b.cfg.WebhookRounds)
	b.rep.add(row(mHookOK, ms(answering), "the same, webhooks off", ms(off), nil, note))
	b.rep.add(row(mHookHung, ms(hanging), "the same, webhooks off", ms(off), nil, note))
	return nil
}
