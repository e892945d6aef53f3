package web_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	sm "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/web"
)

// silentPost sends a POST's headers (Content-Length 1000, form-encoded)
// and then nothing, and returns the response read within wait, how long it
// took, and whether the server then closed the connection within wait.
func silentPost(t *testing.T, st *handlerStack, path, header string, wait time.Duration) (*http.Response, time.Duration, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", st.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The clock starts before the headers go: the server's deadline starts
	// once it has them, so took is never less than it (taken after the
	// write, a preempted client saw 299.8 ms of a 300 ms deadline).
	start := time.Now()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n%s\r\nmessage=", path, st.srv.Listener.Addr(), header)
	conn.SetReadDeadline(start.Add(wait))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("POST %s with a silent body: no response within %v: %v", path, wait, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	conn.SetReadDeadline(time.Now().Add(wait))
	_, err = br.Read(make([]byte, 1))
	return resp, took, errors.Is(err, io.EOF)
}

// A post that is refused (another browser's conversation, a foreign
// origin) is answered at once, without waiting for its body, and the
// connection closed.
func TestSilentBodyRefusedAtOnce(t *testing.T) {
	st := startHandlersOpts(t, sm.Script(t), web.Options{BodyTimeout: time.Hour})
	for _, c := range []struct{ what, path, header string }{
		{"no such conversation", "/c/c0000000000000000/messages", ""},
		{"a foreign origin", "/c", "Origin: http://evil.example\r\n"},
	} {
		resp, took, closed := silentPost(t, st, c.path, c.header, 5*time.Second)
		t.Logf("%s: %s after %v, closed %v", c.what, resp.Status, took, closed)
		if resp.StatusCode < 400 || took > 3*time.Second || !closed {
			t.Errorf("%s: %s after %v, connection closed: %v; want a refusal at once, and the connection closed", c.what, resp.Status, took, closed)
		}
	}
}

// A post whose body does not come is cut off at the body's deadline.
func TestSilentBodyCutAtDeadline(t *testing.T) {
	const deadline = 300 * time.Millisecond
	st := startHandlersOpts(t, sm.Script(t), web.Options{BodyTimeout: deadline})
	resp, took, closed := silentPost(t, st, "/c", "", 10*time.Second)
	t.Logf("%s after %v, closed %v", resp.Status, took, closed)
	if resp.StatusCode != http.StatusRequestTimeout || took < deadline || took > deadline+5*time.Second || !closed {
		t.Errorf("%s after %v, connection closed: %v; want 408 after the %v deadline, and the connection closed", resp.Status, took, closed, deadline)
	}
}

// A form is bounded: its size, its fields, its type (the scripted model
// has no turn: a conversation started would fail the test).
func TestFormBounds(t *testing.T) {
	st := startHandlersOpts(t, sm.Script(t), web.Options{})
	post := func(contentType, body string) int {
		req, _ := http.NewRequest("POST", st.srv.URL+"/c", strings.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		resp, err := newBrowser(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	const form = "application/x-www-form-urlencoded"
	if code := post(form, "message="+strings.Repeat("x", 2<<20)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB message: %d, want 413", code)
	}
	if code := post(form, strings.Repeat("a=&", 100000)+"message=hi"); code != http.StatusBadRequest {
		t.Errorf("100000 fields: %d, want 400", code)
	}
	var mp bytes.Buffer
	mp.WriteString("--b\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nhi\r\n--b--\r\n")
	if code := post("multipart/form-data; boundary=b", mp.String()); code != http.StatusUnsupportedMediaType {
		t.Errorf("a multipart form: %d, want 415", code)
	}
	if code := post(form, url.Values{"other": {"1"}, "message": {"  "}}.Encode()); code != http.StatusSeeOther {
		t.Errorf("an empty message: %d, want the redirect home", code)
	}
}
