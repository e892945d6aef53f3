package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// kubeWatch: WatchDirectory through the io sidecar, over the public API,
// on a replica whose caps are small: a recursive watch of the workspace is
// in place before it reports; a tree made by a command inside the sandbox
// comes as CREATE events with workspace paths (a directory's own contents
// included); a second watch of the sandbox passes the per-sandbox cap of
// calls (RESOURCE_EXHAUSTED); a directory beyond the per-sandbox cap of
// directories, counted by sandboxd from what the sidecar reports, ends the
// watch with RESOURCE_EXHAUSTED; a missing directory is NOT_FOUND, and a
// watched directory removed ends its watch with NOT_FOUND.
func kubeWatch(t *testing.T, k *kubeEnv) {
	ctx := e2eCtx(t)
	d := k.replica(t, "watch-a", "--max-watches-per-sandbox", "1", "--max-watch-dirs-per-sandbox", "3")
	c, _ := d.client(t)
	id := acquire(t, ctx, c, "watch-user").GetSandbox().GetSandboxId()
	defer deleteQuietly(c, id)

	// recvs is a watch's messages, each waited for at most 60s.
	type msg struct {
		resp *sandboxv1.WatchDirectoryResponse
		err  error
	}
	watch := func(path string, recursive bool) (<-chan msg, context.CancelFunc) {
		wctx, cancel := context.WithCancel(ctx)
		s, err := c.WatchDirectory(wctx, &sandboxv1.WatchDirectoryRequest{SandboxId: id, Path: path, Recursive: recursive})
		out := make(chan msg, 100)
		go func() {
			defer close(out)
			if err != nil {
				out <- msg{err: err}
				return
			}
			for {
				r, err := s.Recv()
				out <- msg{r, err}
				if err != nil {
					return
				}
			}
		}()
		return out, cancel
	}
	next := func(ch <-chan msg, what string) msg {
		t.Helper()
		select {
		case m := <-ch:
			return m
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: nothing within 60s", what)
		}
		return msg{}
	}
	endOf := func(ch <-chan msg, what string) error {
		t.Helper()
		for {
			m := next(ch, what)
			if m.err != nil {
				return m.err
			}
		}
	}

	refused := func(path, what string) error {
		t.Helper()
		ch, cancel := watch(path, false)
		defer cancel()
		return endOf(ch, what)
	}

	all, cancelAll := watch("", true)
	defer cancelAll()
	if m := next(all, "the watch in place"); m.err != nil || m.resp.GetEvent() != nil {
		t.Fatalf("first message %v, %v; want one without an event", m.resp, m.err)
	}
	if err := refused("proj", "a second watch"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second watch of the sandbox: %v; want RESOURCE_EXHAUSTED (--max-watches-per-sandbox 1)", err)
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "import os\nos.makedirs('proj/deep')\nopen('proj/deep/f.txt', 'w').write('hi')"}), "make the tree")
	want := map[string]bool{"proj": true, "proj/deep": true, "proj/deep/f.txt": true}
	for len(want) > 0 {
		m := next(all, "the tree's events")
		if m.err != nil {
			t.Fatalf("the watch ended before reporting %v: %v", want, m.err)
		}
		if e := m.resp.GetEvent(); e.GetType() == sandboxv1.WatchEventType_WATCH_EVENT_TYPE_CREATE {
			delete(want, e.GetPath())
		}
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "import os\nos.makedirs('proj/fourth')"}), "a fourth directory")
	if err := endOf(all, "the fourth directory"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a fourth directory watched: %v; want RESOURCE_EXHAUSTED (--max-watch-dirs-per-sandbox 3)", err)
	}
	cancelAll()

	if err := refused("missing", "a missing directory"); status.Code(err) != codes.NotFound {
		t.Errorf("a watch of a missing directory: %v; want NOT_FOUND", err)
	}
	deep, cancelDeep := watch("proj/deep", false)
	defer cancelDeep()
	if m := next(deep, "the watch of proj/deep in place"); m.err != nil || m.resp.GetEvent() != nil {
		t.Fatalf("first message %v, %v; want one without an event", m.resp, m.err)
	}
	mustOK(t, execute(t, ctx, c, &sandboxv1.ExecuteRequest{SandboxId: id, Code: "import shutil\nshutil.rmtree('proj/deep')"}), "remove proj/deep")
	if err := endOf(deep, "proj/deep removed"); status.Code(err) != codes.NotFound {
		t.Errorf("the watch of a removed directory: %v; want NOT_FOUND", err)
	}
}
