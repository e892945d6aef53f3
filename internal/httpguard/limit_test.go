package httpguard_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/httpguard"
	"github.com/sandboxd/sandboxd/internal/httpguard/guardtest"
)

const testCap = 256 << 10

// capServer serves a handler behind a Guard with limits l that refuses
// (403) a request without X-Key, caps the body at testCap (LimitBody) and
// reads it whole, answering its length.
func capServer(t *testing.T, l httpguard.Limits) *httptest.Server {
	t.Helper()
	g := httpguard.New(l, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, q := g.Start(w, r)
		defer q.End()
		if r.Header.Get("X-Key") == "" {
			http.Error(w, "no key", http.StatusForbidden)
			return
		}
		if err := httpguard.LimitBody(w, r, testCap); httpguard.TooLarge(w, err) {
			return
		}
		if !q.Admit(r, "k") {
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if httpguard.TooLarge(w, err) {
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, n)
	}))
	t.Cleanup(srv.Close)
	return srv
}

var key = http.Header{"X-Key": {"k"}}

// A body declared past the cap is refused (413, naming it) without 100
// Continue, at once; one sent whole past it, declared or chunked, gets
// its refusal read by a client that reads only once it has sent it all,
// as does one refused for another reason (403).
func TestLimitBodyRefusalIsRead(t *testing.T) {
	srv := capServer(t, httpguard.Limits{})
	r := guardtest.Declared(t, guardtest.Request{URL: srv.URL + "/", Header: key, Size: 20 << 20}, 5*time.Second)
	guardtest.CheckRefused(t, "declared", r, testCap, true)
	if !r.Close {
		t.Error("declared: the refusal does not say Connection: close")
	}
	for _, chunked := range []bool{false, true} {
		r := guardtest.Sent(t, guardtest.Request{URL: srv.URL + "/", Header: key, Size: 20 << 20, Chunked: chunked}, 20*time.Second)
		guardtest.CheckRefused(t, fmt.Sprintf("sent, chunked %v", chunked), r, testCap, false)
		r = guardtest.Sent(t, guardtest.Request{URL: srv.URL + "/", Size: 20 << 20, Chunked: chunked}, 20*time.Second)
		if r.Status != http.StatusForbidden {
			t.Errorf("sent without a key, chunked %v: %d %q; want 403", chunked, r.Status, r.Body)
		}
	}
	// Within the cap, the body is read.
	r = guardtest.Sent(t, guardtest.Request{URL: srv.URL + "/", Header: key, Size: testCap, Chunked: true}, 20*time.Second)
	if r.Status != http.StatusOK || r.Body != fmt.Sprint(testCap) {
		t.Errorf("a body at the cap: %d %q", r.Status, r.Body)
	}
}

// Many bodies past the cap at once each get their refusal, declared ones
// without waiting for a place among the bodies being read.
func TestLimitBodyConcurrent(t *testing.T) {
	srv := capServer(t, httpguard.Limits{MaxReads: 1, QueueWait: time.Hour})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			q := guardtest.Request{URL: srv.URL + "/", Header: key, Size: 8<<20 + 100, Chunked: i%2 == 1}
			if i%4 == 0 {
				guardtest.CheckRefused(t, fmt.Sprint("declared ", i), guardtest.Declared(t, q, 10*time.Second), testCap, true)
				return
			}
			guardtest.CheckRefused(t, fmt.Sprint("sent ", i), guardtest.Sent(t, q, 30*time.Second), testCap, false)
		})
	}
	wg.Wait()
}

// A refusal is sent whole (with its Content-Length) at once, before the
// rest of the body is drained; the drain is bounded in time (a silent
// client) and in bytes (an endless one).
func TestDrainIsBounded(t *testing.T) {
	srv := capServer(t, httpguard.Limits{DrainTimeout: 300 * time.Millisecond, DrainBytes: 1 << 20})
	dial := func(header string) (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\n%s\r\n", header)
		return conn, bufio.NewReader(conn)
	}

	// Silent after a part of its body: the whole refusal comes at once,
	// the connection closes after the drain's time.
	conn, br := dial("X-Key: k\r\nTransfer-Encoding: chunked\r\n")
	fmt.Fprintf(conn, "%x\r\n%s\r\n", testCap+1, strings.Repeat("a", testCap+1))
	start := time.Now()
	conn.SetReadDeadline(start.Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || resp.ContentLength != int64(len(body)) {
		t.Fatalf("%s, Content-Length %d, %q, %v; want 413 sent whole", resp.Status, resp.ContentLength, body, err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("the refusal took %v: it waited for the drain", took)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the refusal: %v; want the connection closed", err)
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 5*time.Second {
		t.Errorf("the connection closed after %v; want the drain's 300 ms", took)
	}

	// Endless: the connection is closed (or reset) once DrainBytes are
	// read past the response, not at the drain's deadline.
	conn, _ = dial("X-Key: k\r\nContent-Length: 1000000000\r\n")
	start = time.Now()
	conn.SetWriteDeadline(start.Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	var sent int64
	for sent < 1e9 {
		n, err := conn.Write(buf)
		sent += int64(n)
		if err != nil {
			break
		}
	}
	if sent > 32<<20 {
		t.Errorf("the server read %d bytes of a refused body; want about 1 MiB (DrainBytes) and the socket buffers", sent)
	}
}

// An informational answer (103, a proxied 100 Continue) before the body is
// read does not start the response: the body is still read whole, under
// its own deadline rather than the drain's, and the connection kept.
func TestInformationalAnswerIsNotARefusal(t *testing.T) {
	g := httpguard.New(httpguard.Limits{DrainTimeout: 100 * time.Millisecond}, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, q := g.Start(w, r)
		defer q.End()
		w.WriteHeader(http.StatusEarlyHints)
		if !q.Admit(r, "k") {
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprint(w, n)
	}))
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
	br := bufio.NewReader(conn)
	hints, err := http.ReadResponse(br, nil)
	if err != nil || hints.StatusCode != http.StatusEarlyHints {
		t.Fatalf("want 103 first: %v %v", hints, err)
	}
	// Past the drain's deadline, which must not apply.
	time.Sleep(300 * time.Millisecond)
	fmt.Fprint(conn, "hello")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "5" || resp.Close {
		t.Errorf("%s %q (Connection: close %v); want 200 \"5\" on a connection kept", resp.Status, body, resp.Close)
	}
}
