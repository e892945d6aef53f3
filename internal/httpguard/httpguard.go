// Package httpguard bounds what a client can hold of an HTTP server by
// sending a request body slowly, or not at all: every HTTP door of the
// project (sandboxd's E2B door, sandbox-mcp's HTTP endpoint, the agent's
// web UI) puts its requests through a Guard.
//
// A request with a body goes through three steps:
//
//  1. Start, before anything reads the body: a response that starts before
//     the body was read to its end (a refusal, or an error while reading
//     it) says Connection: close, so that net/http sends it at once rather
//     than first discarding up to 256 KiB of the body, and what net/http
//     still reads of the body after the response (it does, lest the client
//     be reset before reading the response) is bounded by DrainTimeout. A
//     client that sends headers and then nothing cannot hold the
//     connection, and a refusal never waits for the body.
//  2. Admit, once the request is accepted (authenticated): a place among
//     the bodies being read at once, globally and per key (a tenant), so
//     that many large or slow bodies cannot hold unbounded memory; a
//     request that finds none within QueueWait is answered 503. Then a
//     deadline for the whole body (BodyTimeout, extended by what arrives
//     when MinBodyRate is set), after which reading it fails and the
//     connection is closed. AdmitStream sets the deadline without a place,
//     for bodies streamed somewhere rather than held (uploads);
//     AdmitUntilEnd keeps the place until End, for bodies decoded only once
//     read whole.
//  3. End, when the handler returns: the place is given back if the body
//     was not read to its end, where it is given back already. At the
//     body's end its deadline is lifted, so a response streamed after it
//     (SSE, NDJSON, an RPC stream) has no time limit.
//
// A body's size is capped by LimitBody, with the caller's bound, before
// anything reads the body: a body declared longer is refused at once,
// without 100 Continue. The response to a body refused before its end
// (too long, or any refusal) reaches the client: End sends it and then
// reads and discards the rest of the body, at most DrainBytes, for as long
// as it keeps arriving (a gap of DrainTimeout ends it) and at most
// DrainTime in all, so that the client, which may send its whole body
// before it reads, finds the response rather than a reset connection: a
// lingering close, as nginx's lingering_timeout and lingering_time.
//
// A Guard does not bound the time to read headers (set
// http.Server.ReadHeaderTimeout). LimitListener bounds connections.
package httpguard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits are a Guard's bounds. Zero fields take DefaultLimits' values,
// except MaxReadsPerKey and MinBodyRate, whose zero means no such bound,
// and FreeBelow, whose zero means every body needs a place.
type Limits struct {
	// BodyTimeout is the time to read a whole body, from when it is
	// admitted (after its place among the bodies being read, if any).
	BodyTimeout time.Duration
	// MinBodyRate, when positive, extends the body's deadline as the body
	// arrives: after n bytes, the deadline is BodyTimeout plus n/MinBodyRate
	// seconds from the admission. A client sending at least that many
	// bytes a second is never cut off; a silent one is after BodyTimeout.
	MinBodyRate int64
	// DrainTimeout bounds what is read of a body after a response that did
	// not read it to its end: the longest wait for more of it. A silent
	// client is let go after it; one still sending is read on (a fixed
	// deadline of 1 s reset four 48 MiB bodies sent at once on a busy
	// two-core machine before their senders could read the refusal).
	DrainTimeout time.Duration
	// DrainTime bounds that reading in all, from the handler's end, for a
	// client that trickles its body.
	DrainTime time.Duration
	// DrainBytes is the most bytes of such a body read and discarded
	// after the response (a client still sending past it may find the
	// connection reset rather than the response).
	DrainBytes int64
	// MaxReads is the most bodies read at once (their places).
	MaxReads int
	// MaxReadsPerKey, when positive, is the most bodies read at once under
	// one key (Admit's key: a tenant). It should be below MaxReads, so that
	// one key cannot take every place.
	MaxReadsPerKey int
	// QueueWait is how long a body waits for a place before the request is
	// answered 503.
	QueueWait time.Duration
	// FreeBelow: a body whose declared length (Content-Length) is at most
	// this many bytes needs no place, only its deadline: small bodies are
	// cheap, and need not queue behind large ones. A body of unknown length
	// (chunked) always needs one.
	FreeBelow int64
}

// DefaultLimits are the defaults of Limits' fields.
var DefaultLimits = Limits{
	BodyTimeout:  30 * time.Second,
	DrainTimeout: time.Second,
	DrainTime:    10 * time.Second,
	DrainBytes:   64 << 20,
	MaxReads:     16,
	QueueWait:    10 * time.Second,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.BodyTimeout <= 0 {
		l.BodyTimeout = d.BodyTimeout
	}
	if l.DrainTimeout <= 0 {
		l.DrainTimeout = d.DrainTimeout
	}
	if l.DrainTime <= 0 {
		l.DrainTime = max(d.DrainTime, l.DrainTimeout)
	}
	if l.DrainBytes <= 0 {
		l.DrainBytes = d.DrainBytes
	}
	if l.MaxReads <= 0 {
		l.MaxReads = d.MaxReads
	}
	if l.QueueWait <= 0 {
		l.QueueWait = d.QueueWait
	}
	return l
}

// Guard applies Limits to the requests of one server. Build it with New.
type Guard struct {
	l      Limits
	log    *slog.Logger
	global chan struct{} // a place per body being read

	mu   sync.Mutex
	keys map[string]*keyPlaces
}

// keyPlaces are the places of one key, while any is held or awaited.
type keyPlaces struct {
	ch   chan struct{}
	refs int
}

// New returns a Guard with limits l; log (nil: none) gets what cannot be
// told to the client.
func New(l Limits, log *slog.Logger) *Guard {
	l = l.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Guard{l: l, log: log, global: make(chan struct{}, l.MaxReads), keys: map[string]*keyPlaces{}}
}

// Limits returns the Guard's limits, defaults applied.
func (g *Guard) Limits() Limits { return g.l }

// Request is one request with a body, from Start to End. Its methods may
// be called on nil (a request without a body): Admit and AdmitStream then
// do nothing and return true.
type Request struct {
	g    *Guard
	w    *closeUnlessRead
	body *trackedBody
	orig io.Reader // the body as net/http gave it, for the drain
}

// Start prepares a request before anything reads its body, and returns the
// writer to answer through (w itself for a request without a body, with a
// nil *Request). Call End when the handler returns.
func (g *Guard) Start(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *Request) {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody { // -1: chunked or unknown
		return w, nil
	}
	cw := &closeUnlessRead{ResponseWriter: w, drain: g.l.DrainTimeout}
	return cw, &Request{g: g, w: cw, orig: r.Body}
}

// Admit lets the body be read: it takes a place among the bodies read at
// once (one of key's too, when MaxReadsPerKey is set; none for a body
// declared at most FreeBelow bytes long), sets the body's deadline and
// replaces r.Body with one that keeps them. It returns false once it has
// answered: 503 with Retry-After when no place frees within QueueWait, 500
// if the deadline cannot be set; or when the client went away meanwhile.
func (q *Request) Admit(r *http.Request, key string) bool {
	return q.admitPlace(r, key, false)
}

// AdmitUntilEnd is Admit, but the place is kept until End rather than
// given back at the body's end: for a request whose body is decoded only
// once it is read whole (a Connect message), by a short handler, so that
// the place bounds the memory of the decoding too.
func (q *Request) AdmitUntilEnd(r *http.Request, key string) bool {
	return q.admitPlace(r, key, true)
}

func (q *Request) admitPlace(r *http.Request, key string, hold bool) bool {
	if q == nil || q.body != nil {
		return true
	}
	release := func() {}
	if r.ContentLength < 0 || r.ContentLength > q.g.l.FreeBelow {
		var ok bool
		if release, ok = q.g.acquire(r.Context(), key); !ok {
			if r.Context().Err() == nil {
				q.w.Header().Set("Retry-After", "1")
				http.Error(q.w, "Service Unavailable: too many requests being read; retry", http.StatusServiceUnavailable)
			}
			return false
		}
	}
	return q.admit(r, release, hold)
}

// AdmitStream lets the body be read under its deadline without a place:
// for a body streamed elsewhere as it arrives (an upload), not held.
func (q *Request) AdmitStream(r *http.Request) bool {
	if q == nil || q.body != nil {
		return true
	}
	return q.admit(r, func() {}, false)
}

func (q *Request) admit(r *http.Request, release func(), hold bool) bool {
	rc := http.NewResponseController(q.w)
	start := time.Now()
	if err := rc.SetReadDeadline(start.Add(q.g.l.BodyTimeout)); err != nil {
		release()
		q.g.log.Error("setting the body's read deadline", "err", err)
		http.Error(q.w, "Internal Server Error", http.StatusInternalServerError)
		return false
	}
	q.body = &trackedBody{ReadCloser: r.Body, rc: rc, release: release, hold: hold,
		start: start, timeout: q.g.l.BodyTimeout, rate: q.g.l.MinBodyRate, set: start.Add(q.g.l.BodyTimeout)}
	q.w.setBody(q.body)
	r.Body = q.body
	return true
}

// End gives back the request's place if the body was not read to its end
// (or AdmitUntilEnd kept it). After a response that started before the
// body was read to its end (a refusal), it sends the response and then
// reads and discards the rest of the body, at most DrainBytes, while it
// keeps arriving (DrainTimeout, DrainTime): a client that sends its whole
// body before it reads the response (most do) would otherwise find the connection reset, its
// unread response lost, when the server closes a connection with unread
// data; closing once the body has ended resets nothing.
func (q *Request) End() {
	if q == nil {
		return
	}
	if q.body != nil {
		q.body.finish(nil)
		q.body.relOnce.Do(q.body.release)
	}
	if !q.w.endRefusal() {
		return
	}
	if q.body != nil {
		if end := q.body.ended(); end != nil && !errors.Is(end, io.EOF) {
			return // its deadline: the connection is done reading
		}
	}
	rc := http.NewResponseController(q.w.ResponseWriter)
	if rc.Flush() != nil {
		return
	}
	// The response is written: reading the body no longer sends 100
	// Continue (net/http sends it at a body's first read only before a
	// response), so a client that waits for it is not asked for the body
	// it was refused.
	q.drain(rc)
}

// drain reads and discards the rest of the body: at most DrainBytes, each
// read within DrainTimeout of the last, all within DrainTime.
func (q *Request) drain(rc *http.ResponseController) {
	end := time.Now().Add(q.g.l.DrainTime)
	buf := make([]byte, 32<<10)
	for left := q.g.l.DrainBytes; left > 0; {
		deadline := time.Now().Add(q.g.l.DrainTimeout)
		if deadline.After(end) {
			deadline = end
		}
		if rc.SetReadDeadline(deadline) != nil {
			return
		}
		n, err := q.orig.Read(buf[:min(int64(len(buf)), left)])
		left -= int64(n)
		if err != nil {
			return
		}
	}
}

// acquire waits up to QueueWait for a place (key's first, then a global
// one); release gives them back.
func (g *Guard) acquire(ctx context.Context, key string) (release func(), ok bool) {
	wait := time.NewTimer(g.l.QueueWait)
	defer wait.Stop()
	var kp *keyPlaces
	if g.l.MaxReadsPerKey > 0 {
		kp = g.keyRef(key)
		select {
		case kp.ch <- struct{}{}:
		case <-wait.C:
			g.keyUnref(key)
			return nil, false
		case <-ctx.Done():
			g.keyUnref(key)
			return nil, false
		}
	}
	keyRelease := func() {
		if kp != nil {
			<-kp.ch
			g.keyUnref(key)
		}
	}
	select {
	case g.global <- struct{}{}:
	case <-wait.C:
		keyRelease()
		return nil, false
	case <-ctx.Done():
		keyRelease()
		return nil, false
	}
	return func() {
		<-g.global
		keyRelease()
	}, true
}

func (g *Guard) keyRef(key string) *keyPlaces {
	g.mu.Lock()
	defer g.mu.Unlock()
	kp := g.keys[key]
	if kp == nil {
		kp = &keyPlaces{ch: make(chan struct{}, g.l.MaxReadsPerKey)}
		g.keys[key] = kp
	}
	kp.refs++
	return kp
}

func (g *Guard) keyUnref(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if kp := g.keys[key]; kp != nil {
		if kp.refs--; kp.refs == 0 {
			delete(g.keys, key)
		}
	}
}

// trackedBody is a request body being read under a deadline and holding a
// place among the bodies being read. At its end the deadline is lifted
// (the response, a stream, may last much longer, and a read deadline left
// on the connection would cancel the request, which ends the response)
// and the place is given back. net/http (1.26) lifts the deadline itself
// when the body ends and it starts watching the connection, but does not
// document it.
type trackedBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	release func()

	// The deadline moves with what arrived when rate > 0.
	start   time.Time
	timeout time.Duration
	rate    int64
	read    int64
	set     time.Time // the deadline last set

	// hold keeps the place until End (AdmitUntilEnd).
	hold    bool
	once    sync.Once // the body's end
	relOnce sync.Once // the place given back
	mu      sync.Mutex
	end     error // io.EOF once read to its end; the error that ended reading it
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.rate > 0 {
		b.read += int64(n)
		dl := b.start.Add(b.timeout + time.Duration(float64(b.read)/float64(b.rate)*float64(time.Second)))
		if dl.Sub(b.set) >= time.Second {
			b.set = dl
			b.rc.SetReadDeadline(dl)
		}
	}
	if err != nil {
		b.finish(err)
	}
	return n, err
}

// finish records the body's end (nil: its handler's end) and gives back
// the place, unless it is held until End; at the body's end it lifts the
// deadline.
func (b *trackedBody) finish(end error) {
	if _, ok := errors.AsType[*http.MaxBytesError](end); ok {
		// Cut at its cap (LimitBody before Admit): the connection can
		// still be read, the body is merely not read to its end.
		end = nil
	}
	b.once.Do(func() {
		b.mu.Lock()
		b.end = end
		b.mu.Unlock()
		if errors.Is(end, io.EOF) {
			b.rc.SetReadDeadline(time.Time{})
		}
	})
	if !b.hold {
		b.relOnce.Do(b.release)
	}
}

// ended is what ended reading the body: io.EOF, another error (its
// deadline), or nil while it is not read to its end.
func (b *trackedBody) ended() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.end
}

// closeUnlessRead is the ResponseWriter of a request with a body. When the
// response starts before the body was read to its end (a refusal, or an
// error while reading it), the response says Connection: close, so that
// net/http sends it at once rather than first discarding up to 256 KiB of
// the body, and the connection may read the rest of the body only for
// drain: net/http still discards what it can of it after the response
// (lest the client be reset before reading the response), which a silent
// client would otherwise make last until the body's deadline, or forever
// before one is set.
//
// Such a response, when it is short (at most maxHeldResponse bytes) and
// not flushed, is held until End and sent whole, with its Content-Length:
// the client reads all of it at once, while End then drains the body,
// rather than waiting for the end of a chunked response until the drain
// is over.
type closeUnlessRead struct {
	http.ResponseWriter
	drain time.Duration
	start sync.Once

	mu   sync.Mutex
	body *trackedBody // nil until the body is admitted

	// After a response that started before the body's end (refusal):
	// held, while it is held, its status (0 while none) and bytes.
	refusal bool
	held    bool
	code    int
	buf     []byte
}

// maxHeldResponse is the most bytes of a refusal held until End.
const maxHeldResponse = 64 << 10

func (w *closeUnlessRead) setBody(b *trackedBody) {
	w.mu.Lock()
	w.body = b
	w.mu.Unlock()
}

func (w *closeUnlessRead) started() {
	w.start.Do(func() {
		w.mu.Lock()
		b := w.body
		w.mu.Unlock()
		var end error
		if b != nil {
			end = b.ended()
		}
		if errors.Is(end, io.EOF) {
			return
		}
		w.Header().Set("Connection", "close")
		if end == nil {
			// Unread (a refusal); after a read error (the deadline) the
			// connection is done reading already.
			http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now().Add(w.drain))
		}
		w.refusal = true
		w.held = w.Header().Get("Content-Length") == ""
	})
}

func (w *closeUnlessRead) WriteHeader(code int) {
	if code < 200 {
		// An informational answer (a proxied 100 Continue, 103) does
		// not start the response.
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.started()
	if w.held {
		if w.code == 0 {
			w.code = code
		}
		return // a second one is superfluous, as net/http has it
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeUnlessRead) Write(p []byte) (int, error) {
	w.started()
	if w.held {
		if w.code == 0 {
			w.code = http.StatusOK
		}
		if len(w.buf)+len(p) <= maxHeldResponse {
			w.buf = append(w.buf, p...)
			return len(p), nil
		}
		if err := w.release(false); err != nil {
			return 0, err
		}
	}
	return w.ResponseWriter.Write(p)
}

// release sends a held response (with its Content-Length when whole): as
// it stands, at End or when it outgrows maxHeldResponse or is flushed.
func (w *closeUnlessRead) release(whole bool) error {
	w.held = false
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if whole {
		w.Header().Set("Content-Length", strconv.Itoa(len(w.buf)))
	}
	w.ResponseWriter.WriteHeader(w.code)
	// Written even when empty: a write stops net/http from sending 100
	// Continue at the body's next read.
	_, err := w.ResponseWriter.Write(w.buf)
	w.buf = nil
	return err
}

// endRefusal sends what is held of a refusal at the handler's end, and
// reports whether the response was one.
func (w *closeUnlessRead) endRefusal() bool {
	if w.held {
		w.release(true)
	}
	return w.refusal
}

// Flush lets a handler that asserts http.Flusher stream through it.
func (w *closeUnlessRead) Flush() {
	w.started()
	if w.held {
		w.release(false)
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController (which SDKs use to flush streamed
// events and set deadlines) reach the connection.
func (w *closeUnlessRead) Unwrap() http.ResponseWriter { return w.ResponseWriter }
