package e2bapi

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/httpguard/guardtest"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/filesystem/filesystemconnect"
	"github.com/sandboxd/sandboxd/orchestrator/door/e2bapi/envdproto/process/processconnect"
)

// A body past its bound is answered, 413 naming the bound: before 100
// Continue when it is declared so (a client waiting for 100 Continue sends
// nothing), and, when it is sent whole or chunked, to a client that reads
// only once it has sent it all (the Python SDK's httpx), rather than a
// connection reset under it. Before, such a body was asked for (100
// Continue), read to its bound and the connection closed on the rest, so
// that curl reported status 100 and the SDKs a network error.
func TestBodyPastItsBoundIsAnswered(t *testing.T) {
	srv, s, id := hostileServer(t, Config{})
	api := http.Header{"X-Api-Key": {testKey}, "Content-Type": {"application/json"}}
	sandbox := func(port, contentType string) http.Header {
		return http.Header{"E2b-Sandbox-Id": {id}, "E2b-Sandbox-Port": {port},
			"X-Access-Token": {s.accessToken(id)}, "Content-Type": {contentType}}
	}
	cases := []struct {
		name   string
		path   string
		header http.Header
		prefix string
		limit  int64
	}{
		{"create", "/sandboxes", api, `{"templateID":"base","metadata":{"a":"`, maxControlBody},
		{"connect", "/sandboxes/" + id + "/connect", api, `{"timeout":"`, maxControlBody},
		{"execute", "/execute", sandbox(InterpreterPort, "application/json"), `{"code":"`, maxExecuteBody},
		{"contexts", "/contexts", sandbox(InterpreterPort, "application/json"), `{"cwd":"`, maxControlBody},
		{"Process.Start", processconnect.ProcessStartProcedure, sandbox(EnvdPort, "application/connect+json"), "", maxRPCBody + rpcEnvelopeBytes},
		{"Filesystem.Stat", filesystemconnect.FilesystemStatProcedure, sandbox(EnvdPort, "application/json"), `{"path":"`, maxRPCBody + rpcEnvelopeBytes},
	}
	for _, c := range cases {
		q := guardtest.Request{URL: srv.URL + c.path, Header: c.header, Size: 20 << 20, Prefix: c.prefix}
		r := guardtest.Declared(t, q, 10*time.Second)
		guardtest.CheckRefused(t, c.name+", declared", r, c.limit, true)
		if strings.Contains(c.name, ".") && !strings.Contains(r.Body, `"resource_exhausted"`) {
			t.Errorf("%s, declared: %q is not a Connect error (resource_exhausted)", c.name, r.Body)
		}
		for _, chunked := range []bool{false, true} {
			if strings.Contains(c.name, ".") && chunked {
				continue // connect's own refusal, which the RPC tests check
			}
			q.Chunked = chunked
			r := guardtest.Sent(t, q, 30*time.Second)
			guardtest.CheckRefused(t, fmt.Sprintf("%s, sent whole (chunked %v)", c.name, chunked), r, c.limit, false)
		}
	}
	// An upload has no bound at the door (the domain's, per file, applies
	// as it is read): its body is asked for and taken.
	q := guardtest.Request{URL: srv.URL + "/files?path=big", Header: sandbox(EnvdPort, "application/octet-stream"), Size: 20 << 20}
	if r := guardtest.Declared(t, q, 30*time.Second); !r.Continue || r.Status != http.StatusOK {
		t.Errorf("a 20 MiB upload: 100 Continue %v, then %d %q; want it taken", r.Continue, r.Status, r.Body)
	}
}

// Eight /execute bodies past the 8 MiB bound at once, declared or chunked,
// each get their refusal; the declared ones at once, without waiting for
// one of the tenant's two places among the bodies being read; and serving
// them holds no more than the door's bound (its eight places, each body
// twice over while it is decoded).
func TestConcurrentBodiesPastTheBound(t *testing.T) {
	srv, s, id := hostileServer(t, Config{})
	header := http.Header{"E2b-Sandbox-Id": {id}, "E2b-Sandbox-Port": {InterpreterPort},
		"X-Access-Token": {s.accessToken(id)}, "Content-Type": {"application/json"}}
	const clients = 8
	var wg sync.WaitGroup
	_, peak := memDuring(func() {
		for i := range clients {
			wg.Go(func() {
				q := guardtest.Request{URL: srv.URL + "/execute", Header: header, Size: maxExecuteBody + 64, Prefix: `{"code":"`}
				what := fmt.Sprintf("client %d", i)
				switch i % 3 {
				case 0:
					guardtest.CheckRefused(t, what+", declared", guardtest.Declared(t, q, 5*time.Second), maxExecuteBody, true)
				case 1:
					guardtest.CheckRefused(t, what+", sent", guardtest.Sent(t, q, 60*time.Second), maxExecuteBody, false)
				default:
					q.Chunked = true
					guardtest.CheckRefused(t, what+", chunked", guardtest.Sent(t, q, 60*time.Second), maxExecuteBody, false)
				}
			})
		}
		wg.Wait()
	})
	t.Logf("%d concurrent /execute bodies of 8 MiB + 64 B: the heap in use peaked %d MiB above its start", clients, peak>>20)
	// The others are read (their code string held as it is decoded, up
	// to its bound) two at a time; nothing holds a declared one.
	if bound := 2 * maxBodyReads * maxExecuteBody; peak > uint64(bound) {
		t.Errorf("the heap in use peaked %d MiB above its start; want below %d MiB", peak>>20, bound>>20)
	}
}
