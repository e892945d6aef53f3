package main

import (
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/httpguard/guardtest"
)

// /metrics takes no body: one declared is refused (413) before 100
// Continue; one sent whole, declared or chunked, by a client that reads
// only once it has sent it all, gets its answer rather than a reset.
func TestMetricsBodyIsAnswered(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer serveMetrics(lis, newMetricsRegistry(), slog.New(slog.DiscardHandler))()
	q := guardtest.Request{URL: "http://" + lis.Addr().String() + "/metrics", Size: 20 << 20}
	guardtest.CheckRefused(t, "declared", guardtest.Declared(t, q, 10*time.Second), 0, true)
	q.Size = 48 << 20 // more than the sockets' buffers hold (36 MiB here)
	guardtest.CheckRefused(t, "sent whole", guardtest.Sent(t, q, 30*time.Second), 0, false)
	q.Chunked = true
	if r := guardtest.Sent(t, q, 30*time.Second); r.Status != http.StatusOK && r.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("sent whole, chunked: %d %q", r.Status, r.Body)
	}
}
