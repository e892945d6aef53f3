package httpguard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// server serves handler behind a Guard with limits l: the handler refuses
// (403) a request without "X-Key", and otherwise admits the body under
// that key and reads it whole (or streams it when the path is /stream),
// then answers 200 with its length, after waiting for hold if the path is
// /hold (having sent on holding that it holds).
func server(t *testing.T, l Limits, hold <-chan struct{}, holding chan<- struct{}) (*httptest.Server, *Guard) {
	t.Helper()
	g := New(l, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, q := g.Start(w, r)
		defer q.End()
		key := r.Header.Get("X-Key")
		if key == "" {
			http.Error(w, "no key", http.StatusForbidden)
			return
		}
		admitted := false
		if r.URL.Path == "/stream" {
			admitted = q.AdmitStream(r)
		} else {
			admitted = q.Admit(r, key)
		}
		if !admitted {
			return
		}
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, "reading the body: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		if r.URL.Path == "/hold" {
			holding <- struct{}{}
			<-hold
		}
		fmt.Fprintf(w, "%d", n)
	}))
	t.Cleanup(srv.Close)
	return srv, g
}

// rawPost sends a POST's headers (Content-Length length, and the header
// lines given) and then the first bytes of body, and returns the
// connection.
func rawPost(t *testing.T, srv *httptest.Server, path string, length int, header, body string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n%s", path, length, header, body)
	return conn
}

// response reads the response on conn within wait, and then whether the
// server closed the connection within wait.
func response(t *testing.T, conn net.Conn, wait time.Duration) (resp *http.Response, took time.Duration, closed bool) {
	t.Helper()
	start := time.Now()
	conn.SetReadDeadline(start.Add(wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no response within %v: %v", wait, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took = time.Since(start)
	conn.SetReadDeadline(time.Now().Add(wait))
	_, err = br.Read(make([]byte, 1))
	return resp, took, errors.Is(err, io.EOF)
}

// A refusal before the body is read is sent at once and closes the
// connection, whatever the body's deadline.
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	srv, _ := server(t, Limits{BodyTimeout: time.Hour, DrainTimeout: 200 * time.Millisecond}, nil, nil)
	for _, length := range []int{1000, 10 << 20} {
		conn := rawPost(t, srv, "/", length, "", "")
		resp, took, closed := response(t, conn, 5*time.Second)
		if resp.StatusCode != http.StatusForbidden || !resp.Close {
			t.Errorf("Content-Length %d: %s, Connection: close %v; want 403 with Connection: close", length, resp.Status, resp.Close)
		}
		if took > 2*time.Second || !closed {
			t.Errorf("Content-Length %d: the refusal took %v, connection closed: %v", length, took, closed)
		}
	}
	// A client that sends its whole body reads the refusal too.
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader(strings.Repeat("x", 100<<10)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a whole body: %s", resp.Status)
	}
}

// An admitted body that does not come is cut off at its deadline.
func TestBodyDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	srv, _ := server(t, Limits{BodyTimeout: deadline}, nil, nil)
	conn := rawPost(t, srv, "/", 1000, "X-Key: a\r\n", "abc")
	resp, took, closed := response(t, conn, 10*time.Second)
	if resp.StatusCode != http.StatusRequestTimeout || took < deadline || !closed {
		t.Errorf("%s after %v, closed %v; want the handler's read error after %v, and the connection closed", resp.Status, took, closed, deadline)
	}
	// A whole body is read, and the connection kept alive.
	c := srv.Client()
	for range 2 {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader("hello"))
		req.Header.Set("X-Key", "a")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "5" || resp.Close {
			t.Errorf("%s %q, Connection: close %v", resp.Status, b, resp.Close)
		}
	}
}

// With MinBodyRate, a body arriving at more than the rate is read past the
// base deadline; a silent one is cut at it.
func TestMinBodyRate(t *testing.T) {
	const base = 300 * time.Millisecond
	srv, _ := server(t, Limits{BodyTimeout: base, MinBodyRate: 1000}, nil, nil)
	// 1500 bytes in 500-byte steps, one every 100 ms (5000 bytes/s): a
	// second and a half of deadline earned, the body done in 300 ms.
	conn := rawPost(t, srv, "/stream", 1500, "X-Key: a\r\n", "")
	start := time.Now()
	for range 3 {
		time.Sleep(100 * time.Millisecond) // the pace of a slow client, not a synchronisation
		if _, err := conn.Write([]byte(strings.Repeat("y", 500))); err != nil {
			t.Fatal(err)
		}
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a body at 5000 bytes/s: %s after %v", resp.Status, time.Since(start))
	}
	// Silent after 1000 bytes: cut at base + 1 s.
	conn = rawPost(t, srv, "/stream", 5000, "X-Key: a\r\n", strings.Repeat("z", 1000))
	resp, took, closed := response(t, conn, 10*time.Second)
	if resp.StatusCode != http.StatusRequestTimeout || !closed || took > base+time.Second+2*time.Second {
		t.Errorf("silent after 1000 bytes: %s after %v, closed %v", resp.Status, took, closed)
	}
}

// Places: a key holds at most MaxReadsPerKey bodies being read, all keys
// at most MaxReads; a request finding none gets 503 after QueueWait; a
// small body needs none; a body read to its end gives its place back.
func TestPlaces(t *testing.T) {
	hold, holding := make(chan struct{}), make(chan struct{}, 1)
	srv, g := server(t, Limits{BodyTimeout: time.Minute, MaxReads: 3, MaxReadsPerKey: 2, QueueWait: 200 * time.Millisecond, FreeBelow: 100}, hold, holding)
	// Two silent bodies of key a hold a's places.
	a1 := rawPost(t, srv, "/", 1000, "X-Key: a\r\n", "")
	a2 := rawPost(t, srv, "/", 1000, "X-Key: a\r\n", "")
	waitPlaces(t, g, 2)
	post := func(key string, n int) int {
		req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(strings.Repeat("x", n)))
		req.Header.Set("X-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
		return resp.StatusCode
	}
	if code := post("a", 1000); code != http.StatusServiceUnavailable {
		t.Errorf("a third body of key a: %d, want 503", code)
	}
	if code := post("a", 50); code != http.StatusOK {
		t.Errorf("a small body of key a: %d, want 200 (no place needed)", code)
	}
	if code := post("b", 1000); code != http.StatusOK {
		t.Errorf("a body of key b: %d, want 200", code)
	}
	// b's body, read to its end, gave its place back at once: the handler
	// holds on (/hold) without it.
	held := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/hold", strings.NewReader(strings.Repeat("x", 1000)))
		req.Header.Set("X-Key", "b")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			held <- 0
			return
		}
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	select {
	case <-holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request did not reach its handler")
	}
	if code := post("c", 1000); code != http.StatusOK {
		t.Errorf("a body of key c while b's handler holds on: %d, want 200", code)
	}
	// Key c fills the last global place: d finds none.
	c1 := rawPost(t, srv, "/", 1000, "X-Key: c\r\n", "")
	waitPlaces(t, g, 3)
	if code := post("d", 1000); code != http.StatusServiceUnavailable {
		t.Errorf("a body of key d with every place held: %d, want 503", code)
	}
	close(hold)
	if code := <-held; code != http.StatusOK {
		t.Errorf("the held request: %d", code)
	}
	for _, c := range []net.Conn{a1, a2, c1} {
		c.Close()
	}
	waitPlaces(t, g, 0)
	if code := post("a", 1000); code != http.StatusOK {
		t.Errorf("after the silent clients left: %d", code)
	}
	g.mu.Lock()
	n := len(g.keys)
	g.mu.Unlock()
	if n != 0 {
		t.Errorf("%d keys still tracked with no place held", n)
	}
}

// waitPlaces waits (bounded) until n global places are held.
func waitPlaces(t *testing.T, g *Guard, n int) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); len(g.global) != n; {
		if time.Now().After(end) {
			t.Fatalf("%d places held, want %d", len(g.global), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The deadline ends with the body: a response streamed long after it
// comes whole.
func TestStreamOutlivesTheDeadline(t *testing.T) {
	const deadline = 200 * time.Millisecond
	g := New(Limits{BodyTimeout: deadline}, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, q := g.Start(w, r)
		defer q.End()
		if !q.Admit(r, "") {
			return
		}
		io.Copy(io.Discard, r.Body)
		for i := range 4 {
			fmt.Fprintf(w, "line %d\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(deadline) // the response's pace: it outlives the deadline
		}
	}))
	defer srv.Close()
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("body"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(b), "line") != 4 {
		t.Errorf("streamed %q, %v; want 4 lines", b, err)
	}
}

// LimitListener holds at most n connections: the next waits for one to
// close.
func TestLimitListener(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ll := LimitListener(lis, 2)
	defer ll.Close()
	var accepted atomic.Int32
	conns := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := ll.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			conns <- c
		}
	}()
	var clients []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	first := <-conns
	<-conns
	select {
	case <-conns:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	select {
	case c := <-conns:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the third connection was not accepted after one closed")
	}
	if n := accepted.Load(); n != 3 {
		t.Errorf("accepted %d", n)
	}
	if ConnLimit(1<<30) < 1 || ConnLimit(7) > 7 {
		t.Errorf("ConnLimit: %d, %d", ConnLimit(1<<30), ConnLimit(7))
	}
}

// AdmitUntilEnd keeps the place until the handler ends, not only while
// the body is read.
func TestAdmitUntilEnd(t *testing.T) {
	g := New(Limits{MaxReads: 1, QueueWait: 200 * time.Millisecond}, nil)
	hold, holding := make(chan struct{}), make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w, q := g.Start(w, r)
		defer q.End()
		admitted := false
		if r.URL.Path == "/until" {
			admitted = q.AdmitUntilEnd(r, "")
		} else {
			admitted = q.Admit(r, "")
		}
		if !admitted {
			return
		}
		io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/until" {
			holding <- struct{}{}
			<-hold
		}
	}))
	defer srv.Close()
	done := make(chan int, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/until", "text/plain", strings.NewReader("body"))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-holding
	resp, err := http.Post(srv.URL, "text/plain", strings.NewReader("other"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("while a handler holds the only place after its body: %s, want 503", resp.Status)
	}
	close(hold)
	if code := <-done; code != http.StatusOK {
		t.Errorf("the holding request: %d", code)
	}
	waitPlaces(t, g, 0)
}
