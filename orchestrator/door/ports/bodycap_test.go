package ports

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/httpguard/guardtest"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// A body past MaxBodyBytes is answered 413 naming the bound: declared so,
// before 100 Continue and without reaching the sandbox (before, the body
// was asked for and streamed to the sandbox up to the bound); sent whole,
// declared or chunked, to a client that reads only once it has sent it
// all, rather than a reset; several at once each get theirs.
func TestBodyPastTheBoundIsAnswered(t *testing.T) {
	const limit = 256 << 10
	var reached atomic.Int32
	w := newWorld(t, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		fmt.Fprintf(rw, "read %d", n)
	}), func(c *Config) { c.MaxBodyBytes = limit })
	header := http.Header{"Host": {host(idA)}, core.TrafficTokenHeader: {w.front.Token(idA)}}
	q := guardtest.Request{URL: w.url + "/upload", Header: header, Size: 20 << 20}
	guardtest.CheckRefused(t, "declared", guardtest.Declared(t, q, 10*time.Second), limit, true)
	if n := reached.Load(); n != 0 {
		t.Errorf("a body declared past the bound reached the sandbox (%d requests)", n)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			q := q
			// More than the sockets' buffers hold (36 MiB here), less
			// than the drain's 64 MiB.
			q.Size, q.Chunked = 48<<20, i%2 == 1
			guardtest.CheckRefused(t, fmt.Sprintf("sent whole (chunked %v)", q.Chunked), guardtest.Sent(t, q, 30*time.Second), limit, false)
		})
	}
	wg.Wait()
}
