package main

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/sandboxd/sandboxd/internal/httpguard/guardtest"
)

// A body past the 4 MiB cap is answered 413 naming the cap: declared so,
// before 100 Continue (before, the body was asked for, read to the cap and
// the connection closed on the rest), and sent whole, declared or
// chunked, to a client that reads only once it has sent it all, rather
// than a reset; several at once each get theirs.
func TestHTTPBodyPastTheCapIsAnswered(t *testing.T) {
	u, tools := endpoint(t, httpConfig{token: testToken}, 0)
	header := http.Header{"Authorization": {"Bearer " + testToken}, "Content-Type": {"application/json"},
		"Accept": {"application/json, text/event-stream"}}
	const limit = mcp.DefaultMaxRequestBodyBytes
	q := guardtest.Request{URL: u, Header: header, Size: 20 << 20, Prefix: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"x":"`}
	guardtest.CheckRefused(t, "declared", guardtest.Declared(t, q, 10*time.Second), limit, true)
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
	if calls := tools.calls(); len(calls) != 0 {
		t.Errorf("tools called: %v", calls)
	}
}
