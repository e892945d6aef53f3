// Package guardtest checks, for the tests of every HTTP door, that a body
// past the door's cap is answered: a client that declares it (with
// Expect: 100-continue) gets the refusal and never 100 Continue, and one
// that sends it all before reading (as most SDKs do), declared or chunked,
// reads the refusal rather than a reset connection. The clients are raw
// TCP, so that what the server sends shows as it is.
package guardtest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// Request is a request with a body past a door's cap.
type Request struct {
	// URL is the server's URL with the request's path (and query).
	URL string
	// Method is POST unless set.
	Method string
	// Header is sent as it is (Host is the URL's unless set).
	Header http.Header
	// Size is the body's size; Chunked sends it chunked rather than
	// with its Content-Length.
	Size    int64
	Chunked bool
	// Prefix starts the body (a JSON object's start, say); the rest is
	// filler ("a").
	Prefix string
}

// Refusal is what the server answered.
type Refusal struct {
	// Status is the final status; Continue, whether 100 Continue came
	// before it.
	Status   int
	Continue bool
	Header   http.Header
	Body     string
	// Close is whether the answer said Connection: close.
	Close bool
}

func (q *Request) head() (addr string, head []byte, err error) {
	u, err := url.Parse(q.URL)
	if err != nil {
		return "", nil, err
	}
	method := q.Method
	if method == "" {
		method = http.MethodPost
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, u.RequestURI())
	if q.Header.Get("Host") == "" {
		fmt.Fprintf(&b, "Host: %s\r\n", u.Host)
	}
	for k, vs := range q.Header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	if q.Chunked {
		b.WriteString("Transfer-Encoding: chunked\r\n")
	} else {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", q.Size)
	}
	b.WriteString("\r\n")
	return u.Host, b.Bytes(), nil
}

// readFinal reads responses until a final one (past 1xx), within the
// connection's deadline.
func readFinal(br *bufio.Reader) (Refusal, error) {
	var out Refusal
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return out, err
		}
		if resp.StatusCode == http.StatusContinue {
			out.Continue = true
			continue
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		out.Status, out.Header, out.Body, out.Close = resp.StatusCode, resp.Header, string(body), resp.Close
		return out, err
	}
}

// Declared sends q's headers with Expect: 100-continue and then nothing,
// as curl and SDKs do for a large body, and returns the answer that came
// within wait. It fails the test if none did. A server that answers
// 100 Continue (Refusal.Continue) gets the body, so that the test sees what
// follows.
func Declared(t testing.TB, q Request, wait time.Duration) Refusal {
	t.Helper()
	q.Chunked = false
	addr, head, err := q.head()
	if err != nil {
		t.Fatal(err)
	}
	head = bytes.Replace(head, []byte("\r\n\r\n"), []byte("\r\nExpect: 100-continue\r\n\r\n"), 1)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	if _, err := conn.Write(head); err != nil {
		t.Fatalf("%s: sending the headers: %v", q.URL, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: no answer to the headers (Content-Length %d, Expect: 100-continue) within %v: %v", q.URL, q.Size, wait, err)
	}
	if resp.StatusCode != http.StatusContinue {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return Refusal{Status: resp.StatusCode, Header: resp.Header, Body: string(body), Close: resp.Close}
	}
	// Asked for the body: send it, and read what follows.
	go func() {
		conn.Write([]byte(q.Prefix))
		io.Copy(conn, io.LimitReader(filler{}, q.Size-int64(len(q.Prefix))))
	}()
	out, err := readFinal(br)
	out.Continue = true
	if err != nil {
		t.Errorf("%s: after 100 Continue, no final answer within %v: %v", q.URL, wait, err)
	}
	return out
}

// Sent sends q's headers and its whole body before reading anything, as
// most clients do, and returns the answer read then. It fails the test
// when the body cannot be sent whole (the connection reset under it: a
// client such as httpx reports that, never the answer), when the answer
// cannot be read, or when sending and reading take longer than wait.
func Sent(t testing.TB, q Request, wait time.Duration) Refusal {
	t.Helper()
	addr, head, err := q.head()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(wait))
	w := bufio.NewWriterSize(conn, 64<<10)
	w.Write(head)
	var body io.Reader = io.MultiReader(strings.NewReader(q.Prefix), io.LimitReader(filler{}, q.Size-int64(len(q.Prefix))))
	var sendErr error
	if q.Chunked {
		buf := make([]byte, 32<<10)
		for sendErr == nil {
			n, rerr := body.Read(buf)
			if n > 0 {
				fmt.Fprintf(w, "%x\r\n", n)
				w.Write(buf[:n])
				_, sendErr = w.WriteString("\r\n")
			}
			if rerr != nil {
				break
			}
		}
		if sendErr == nil {
			_, sendErr = w.WriteString("0\r\n\r\n")
		}
	} else {
		_, sendErr = io.Copy(w, body)
	}
	if sendErr == nil {
		sendErr = w.Flush()
	}
	out, err := readFinal(bufio.NewReader(conn))
	if err != nil {
		t.Fatalf("%s: a client that sent its %d-byte body (chunked %v) read no answer: %v (sending: %v)", q.URL, q.Size, q.Chunked, err, sendErr)
	}
	if sendErr != nil {
		// httpx, say, reports this and never reads the answer.
		t.Errorf("%s: the client could not send its %d-byte body (chunked %v): %v (and then read %d %q)", q.URL, q.Size, q.Chunked, sendErr, out.Status, out.Body)
	}
	return out
}

// filler is an endless body.
type filler struct{}

func (filler) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// CheckRefused fails the test unless r is 413 (or 400) and its body names
// limit, without 100 Continue when declared is set.
func CheckRefused(t testing.TB, what string, r Refusal, limit int64, declared bool) {
	t.Helper()
	switch {
	case declared && r.Continue:
		t.Errorf("%s: 100 Continue for a body declared past the limit, then %d %q", what, r.Status, r.Body)
	case r.Status != http.StatusRequestEntityTooLarge && r.Status != http.StatusBadRequest:
		t.Errorf("%s: %d %q; want 413", what, r.Status, r.Body)
	case !strings.Contains(r.Body, fmt.Sprint(limit)):
		t.Errorf("%s: %d %q does not name the limit, %d bytes", what, r.Status, r.Body, limit)
	}
}
