package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTracerProviderExportsToTheDefaultPath checks that spans reach the
// collector URL's standard OTLP/HTTP path when the URL has none. The
// receiver only records requests: decoding OTLP is the SDK's business.
func TestTracerProviderExportsToTheDefaultPath(t *testing.T) {
	got := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.Method + " " + r.URL.Path + " " + r.Header.Get("Content-Type")
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tp, err := newTracerProvider(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(ctx, "probe")
	span.End()
	if err := tp.Shutdown(ctx); err != nil { // flushes
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case req := <-got:
		if req != "POST /v1/traces application/x-protobuf" {
			t.Errorf("collector got %q, want a protobuf POST to /v1/traces", req)
		}
	default:
		t.Fatal("no export reached the collector")
	}
}

func TestServeMetrics(t *testing.T) {
	reg := newMetricsRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sandboxd_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Inc()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := serveMetrics(lis, reg, slog.New(slog.DiscardHandler))
	defer stop()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + lis.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"sandboxd_test_total 1", "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// A request whose body never comes is answered at once, and the
	// connection closed: nothing waits for the body.
	conn, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	silent, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a silent body: no answer within 5 s: %v", err)
	}
	io.Copy(io.Discard, silent.Body)
	if _, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a silent body: %s, then the connection was not closed within 5 s: %v", silent.Status, err)
	}
}
