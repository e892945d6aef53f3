package iosidecar

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// hostileSidecar is an IOService that answers what the protocol forbids:
// the client must refuse it with a clear, bounded error, and not panic.
type hostileSidecar struct {
	sandboxiov1.UnimplementedIOServiceServer
	follow   func(grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error
	download func(grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error
	list     []*sandboxiov1.FileInfo
	file     *sandboxiov1.FileInfo // MakeDirectory's and Rename's answer
	err      error                 // Remove's answer
	status   []byte
	commands *sandboxiov1.ListCommandsResponse // ListCommands' answer
	contexts []*sandboxiov1.ContextInfo        // ListContexts' answer
	watch    func(grpc.ServerStreamingServer[sandboxiov1.WatchDirectoryResponse]) error
}

func (h *hostileSidecar) WatchDirectory(_ *sandboxiov1.WatchDirectoryRequest, s grpc.ServerStreamingServer[sandboxiov1.WatchDirectoryResponse]) error {
	return h.watch(s)
}

func (h *hostileSidecar) ListContexts(context.Context, *sandboxiov1.ListContextsRequest) (*sandboxiov1.ListContextsResponse, error) {
	return &sandboxiov1.ListContextsResponse{Contexts: h.contexts}, h.err
}

func (h *hostileSidecar) ListCommands(context.Context, *sandboxiov1.ListCommandsRequest) (*sandboxiov1.ListCommandsResponse, error) {
	return h.commands, h.err
}

func (h *hostileSidecar) MakeDirectory(context.Context, *sandboxiov1.MakeDirectoryRequest) (*sandboxiov1.MakeDirectoryResponse, error) {
	return &sandboxiov1.MakeDirectoryResponse{File: h.file}, nil
}

func (h *hostileSidecar) Rename(context.Context, *sandboxiov1.RenameRequest) (*sandboxiov1.RenameResponse, error) {
	return &sandboxiov1.RenameResponse{File: h.file}, nil
}

func (h *hostileSidecar) Remove(context.Context, *sandboxiov1.RemoveRequest) (*sandboxiov1.RemoveResponse, error) {
	return &sandboxiov1.RemoveResponse{}, h.err
}

func (h *hostileSidecar) Follow(_ *sandboxiov1.FollowRequest, s grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
	return h.follow(s)
}

func (h *hostileSidecar) Download(_ *sandboxiov1.DownloadRequest, s grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error {
	return h.download(s)
}

func (h *hostileSidecar) ListFiles(context.Context, *sandboxiov1.ListFilesRequest) (*sandboxiov1.ListFilesResponse, error) {
	return &sandboxiov1.ListFilesResponse{Files: h.list}, nil
}

func (h *hostileSidecar) Status(context.Context, *sandboxiov1.StatusRequest) (*sandboxiov1.StatusResponse, error) {
	return &sandboxiov1.StatusResponse{DriverStatus: h.status}, nil
}

func startHostile(t *testing.T, h *hostileSidecar) *Client {
	t.Helper()
	return startHostileServer(t, h)
}

// startHostileServer serves h, any IOService, and returns a client of it.
func startHostileServer(t *testing.T, h sandboxiov1.IOServiceServer) *Client {
	t.Helper()
	srv := grpc.NewServer(grpc.MaxSendMsgSize(1 << 30))
	sandboxiov1.RegisterIOServiceServer(srv, h)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	c, err := Dial(lis.Addr().String(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendEvents is a Follow sending raw events.
func sendEvents(events ...string) func(grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
	return func(s grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
		for _, ev := range events {
			if err := s.Send(&sandboxiov1.FollowResponse{Event: []byte(ev)}); err != nil {
				return err
			}
		}
		return nil
	}
}

func wantBounded(t *testing.T, what string, err, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Errorf("%s = %v; want %v", what, err, kind)
		return
	}
	msg := err.Error()
	if len(msg) > 2<<10 || !utf8.ValidString(msg) {
		t.Errorf("%s: error message of %d bytes (valid UTF-8: %v); want at most 2 KiB of valid UTF-8", what, len(msg), utf8.ValidString(msg))
	}
}

func TestHostileFollow(t *testing.T) {
	huge := `{"seq":1,"type":"stdout","text":"` + strings.Repeat("x", MaxCallRecvMsgSize+1) + `"}`
	for name, tc := range map[string]struct {
		follow func(grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error
		kind   error
	}{
		"event over the size limit": {sendEvents(huge), ErrBadResponse},
		"invalid JSON":              {sendEvents(`{"seq":1,"type":`), ErrBadResponse},
		"no seq":                    {sendEvents(`{"type":"stdout"}`), ErrBadResponse},
		"seq backwards":             {sendEvents(`{"seq":2,"type":"stdout"}`, `{"seq":2,"type":"stdout"}`), ErrBadResponse},
		"seq not after after_seq":   {sendEvents(`{"seq":1,"type":"stdout"}`), ErrBadResponse},
		"unresolved artifact":       {sendEvents(`{"seq":5,"type":"display","refs":{"text/plain":"/etc/passwd"}}`), ErrBadResponse},
		// A message that fits in the trailers is kept, truncated.
		"100 KiB error message": {func(grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
			return status.Error(codes.Internal, strings.Repeat("\xff\xfeé", 100<<10/4))
		}, ErrInternal},
		"100 KiB not found message": {func(grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
			return withReason(codes.NotFound, "OUTPUT_PRUNED", strings.Repeat("\x00é", 100<<10/3))
		}, iolog.ErrPruned},
		// One that does not is refused by the transport (maxHeaderList):
		// the stream is reset.
		"2 MiB error message": {func(grpc.ServerStreamingServer[sandboxiov1.FollowResponse]) error {
			return withReason(codes.NotFound, "OUTPUT_PRUNED", strings.Repeat("\xff\xfeé", 2<<20/4))
		}, ErrInternal},
	} {
		t.Run(name, func(t *testing.T) {
			c := startHostile(t, &hostileSidecar{follow: tc.follow})
			n := 0
			err := c.Follow(ctxT(t), "c1", 1, func(ev ioproto.Event) error { n++; return nil })
			wantBounded(t, "Follow", err, tc.kind)
			if tc.kind == ErrBadResponse && n > 1 {
				t.Errorf("%d events delivered before the bad one", n)
			}
		})
	}
}

func TestHostileFiles(t *testing.T) {
	info := func(p string, size int64) *sandboxiov1.FileInfo { return &sandboxiov1.FileInfo{Path: p, Size: size} }
	sendDownload := func(msgs ...*sandboxiov1.DownloadResponse) func(grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error {
		return func(s grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error {
			for _, m := range msgs {
				if err := s.Send(m); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for name, dl := range map[string]func(grpc.ServerStreamingServer[sandboxiov1.DownloadResponse]) error{
		"more than its size":   sendDownload(&sandboxiov1.DownloadResponse{File: info("/workspace/x", 3), Chunk: []byte("ab")}, &sandboxiov1.DownloadResponse{Chunk: []byte("cd")}),
		"less than its size":   sendDownload(&sandboxiov1.DownloadResponse{File: info("/workspace/x", 3), Chunk: []byte("ab")}),
		"a path outside":       sendDownload(&sandboxiov1.DownloadResponse{File: info("/etc/passwd", 0)}),
		"a relative path":      sendDownload(&sandboxiov1.DownloadResponse{File: info("x/../../y", 0)}),
		"no file description":  sendDownload(&sandboxiov1.DownloadResponse{Chunk: []byte("ab")}),
		"nothing":              sendDownload(),
		"a second description": sendDownload(&sandboxiov1.DownloadResponse{File: info("/workspace/x", 3)}, &sandboxiov1.DownloadResponse{File: info("/workspace/x", 3), Chunk: []byte("abc")}),
	} {
		t.Run("download "+name, func(t *testing.T) {
			c := startHostile(t, &hostileSidecar{download: dl})
			r, _, err := c.Download(ctxT(t), "x")
			if err == nil {
				_, err = io.ReadAll(r)
				r.Close()
			}
			wantBounded(t, "Download", err, ErrBadResponse)
		})
	}
	t.Run("list outside the workspace", func(t *testing.T) {
		c := startHostile(t, &hostileSidecar{list: []*sandboxiov1.FileInfo{info("/workspace/a", 1), info("/workspace/../etc/shadow", 1)}})
		_, err := c.ListFiles(ctxT(t), "", 1)
		wantBounded(t, "ListFiles", err, ErrBadResponse)
	})
	for name, fi := range map[string]*sandboxiov1.FileInfo{
		"a path outside":  info("/etc", 0),
		"a relative path": info("x/../../y", 0),
		"a negative size": info("/workspace/x", -1),
		"no description":  nil,
		"a path with ..":  info("/workspace/../etc", 0),
	} {
		t.Run("make directory, rename: "+name, func(t *testing.T) {
			c := startHostile(t, &hostileSidecar{file: fi})
			_, err := c.MakeDirectory(ctxT(t), "x", true)
			wantBounded(t, "MakeDirectory", err, ErrBadResponse)
			_, err = c.Rename(ctxT(t), "x", "y", false)
			wantBounded(t, "Rename", err, ErrBadResponse)
		})
	}
	t.Run("remove: a reason the files calls cannot answer", func(t *testing.T) {
		c := startHostile(t, &hostileSidecar{err: withReason(codes.ResourceExhausted, "LOG_FULL", "the log is full")})
		wantBounded(t, "Remove", c.Remove(ctxT(t), "x", false), ErrInternal)
	})
	t.Run("driver status", func(t *testing.T) {
		for _, st := range [][]byte{[]byte("{not json"), bytes.Repeat([]byte(" "), maxDriverStatus+1)} {
			c := startHostile(t, &hostileSidecar{status: st})
			_, err := c.DriverStatus(ctxT(t))
			wantBounded(t, "DriverStatus", err, ErrBadResponse)
		}
	})
}
