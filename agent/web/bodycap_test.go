package web_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	scripted "github.com/sandboxd/sandboxd/agent/internal/scriptedmodel"
	"github.com/sandboxd/sandboxd/agent/web"
	"github.com/sandboxd/sandboxd/internal/httpguard/guardtest"
)

// A form past its 1 MiB bound is answered 413 naming the bound: declared
// so, before 100 Continue (before, it was asked for and read to the
// bound), and sent whole, declared or chunked, to a client that reads
// only once it has sent it all, rather than a reset; several at once each
// get theirs (the scripted model has no turn: a conversation started
// would fail the test).
func TestFormPastItsBoundIsAnswered(t *testing.T) {
	const limit = 1 << 20
	st := startHandlersOpts(t, scripted.Script(t), web.Options{})
	q := guardtest.Request{URL: st.srv.URL + "/c", Size: 20 << 20, Prefix: "message=",
		Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}}
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
}
