package iosidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sandboxd/sandboxd/ioproto"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wsarchive"
	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/wspath"
	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// Client bounds: what sandboxd accepts from a sidecar.
const (
	// MaxCallRecvMsgSize bounds one message from the sidecar (an event with
	// its artifacts read back, a listing): the server's MaxSendMsgSize.
	MaxCallRecvMsgSize = MaxSendMsgSize
	// maxHeaderList bounds the headers and trailers of one response, where
	// gRPC carries error messages (percent-encoded): the transport refuses
	// more, as a connection error.
	maxHeaderList = 1 << 20
	// maxErrorMessage bounds the sidecar's error text kept in an error.
	maxErrorMessage = 1 << 10
	// maxDriverStatus bounds the driver status the client decodes (the
	// sidecar reads at most 8 KiB of the file and encodes it again).
	maxDriverStatus = 64 << 10
	// uploadChunk is the size of an Upload's messages.
	uploadChunk = 1 << 20
)

// Client is sandboxd's connection to one sandbox's io sidecar. It is safe
// for concurrent use. Everything it returns was checked: the sidecar shares
// its Pod with hostile code. Each failed call returns an *Error (errors.go)
// or the caller's context error; what it sends is not checked again (the
// package doc says where requests are).
type Client struct {
	conn *grpc.ClientConn
	rpc  sandboxiov1.IOServiceClient
	// noRun: the sidecar answered Run Unimplemented (an older image):
	// commands are appended and followed in two calls.
	noRun atomic.Bool
}

// Dial returns a client of the sidecar at addr ("podIP:7070") that sends
// token with every call. It does not connect until the first call.
//
// The transport is plaintext: the sidecar is reached over the cluster's Pod
// network, and the token is its only protection (a NetworkPolicy should
// admit only sandboxd to port 7070). mTLS between sandboxd and the sidecar
// is future work. opts are appended (tests, interceptors).
func Dial(addr, token string, opts ...grpc.DialOption) (*Client, error) {
	if len(token) < MinTokenLen {
		return nil, fmt.Errorf("the io sidecar token is %d bytes long; at least %d are needed", len(token), MinTokenLen)
	}
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(token)),
		grpc.WithMaxHeaderListSize(maxHeaderList),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxCallRecvMsgSize), grpc.MaxCallSendMsgSize(MaxRecvMsgSize)),
	}, opts...)
	conn, err := grpc.NewClient(addr, all...)
	if err != nil {
		return nil, fmt.Errorf("io sidecar %s: %w", addr, err)
	}
	return &Client{conn: conn, rpc: sandboxiov1.NewIOServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Conn is the underlying connection (health checks).
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// bearer is the token as per-RPC credentials.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: see Dial.
func (bearer) RequireTransportSecurity() bool { return false }

// sanitize makes a message from the sidecar safe to log and to show: valid
// UTF-8, at most maxErrorMessage bytes.
func sanitize(s string) string {
	if len(s) > maxErrorMessage {
		s = s[:maxErrorMessage]
		for !utf8.ValidString(s) && len(s) > maxErrorMessage-utf8.UTFMax {
			s = s[:len(s)-1] // do not leave half a rune to become U+FFFD
		}
		s += "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// badResponse is an ErrBadResponse error.
func badResponse(format string, args ...any) error {
	return &Error{Code: codes.Internal, Message: sanitize(fmt.Sprintf(format, args...)), kind: ErrBadResponse}
}

// Append appends rec to the sandbox's command log, once; appended is false
// when the same command was already there (see iolog.Dir.Append), and an
// exec record re-using a command ID for another command is
// iolog.ErrConflict. The record is encoded here with ioproto.EncodeRecord,
// the protocol's one encoder, which refuses a malformed record (an error
// wrapping ioproto.ErrMalformed, not an *Error).
func (c *Client) Append(ctx context.Context, rec ioproto.Record) (appended bool, err error) {
	line, err := ioproto.EncodeRecord(rec)
	if err != nil {
		return false, err
	}
	resp, err := c.rpc.Append(ctx, &sandboxiov1.AppendRequest{Record: line[:len(line)-1]})
	if err != nil {
		return false, errorOf(ctx, callAppend, err)
	}
	return resp.GetAppended(), nil
}

// Follow calls fn for each event of command cmd with seq above afterSeq,
// in order, and returns nil after the done event (at once if done's seq is
// not above afterSeq). Each event is parsed again with ioproto.ParseEvent,
// must come in increasing seq order above afterSeq, and may not carry
// artifact references (the sidecar resolves them); anything else ends the
// call with ErrBadResponse. fn's error is returned as is. A command not
// in the log is iolog.ErrUnknownCommand, pruned output iolog.ErrPruned. A
// sidecar that stops meanwhile is ErrUnavailable or core.ErrUnavailable:
// follow again from the last seq delivered.
func (c *Client) Follow(ctx context.Context, cmd string, afterSeq int64, fn func(ioproto.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when fn fails or done arrives
	stream, err := c.rpc.Follow(ctx, &sandboxiov1.FollowRequest{CommandId: cmd, AfterSeq: afterSeq})
	if err != nil {
		return errorOf(ctx, callFollow, err)
	}
	return receiveEvents(ctx, cmd, afterSeq, func() ([]byte, error) {
		msg, err := stream.Recv()
		return msg.GetEvent(), err
	}, fn)
}

// Run appends exec record rec to the sandbox's command log, once, then
// calls fn for each of its events from the first, in one call to the
// sidecar: Append, then Follow from seq 0, as one round trip. submitted
// is called when the command is in the log, before any event, with
// whether this call appended it. The errors are Append's until submitted
// is called, Follow's after. A sidecar older than Run answers it
// Unimplemented: Run then makes the two calls, and remembers not to ask
// that sidecar again.
func (c *Client) Run(ctx context.Context, rec ioproto.Record, submitted func(appended bool), fn func(ioproto.Event) error) error {
	if c.noRun.Load() {
		return c.appendThenFollow(ctx, rec, submitted, fn)
	}
	line, err := ioproto.EncodeRecord(rec)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when fn fails or done arrives
	stream, err := c.rpc.Run(ctx, &sandboxiov1.RunRequest{Record: line[:len(line)-1]})
	if err != nil {
		return errorOf(ctx, callAppend, err)
	}
	first, err := stream.Recv()
	switch {
	case err == io.EOF:
		return badResponse("command %s: the stream ended before the command was in the log", rec.CommandID)
	case status.Code(err) == codes.Unimplemented && !hasReason(err):
		c.noRun.Store(true)
		return c.appendThenFollow(ctx, rec, submitted, fn)
	case err != nil:
		return errorOf(ctx, callAppend, err)
	case len(first.GetEvent()) > 0:
		return badResponse("command %s: an event came before the command was in the log", rec.CommandID)
	}
	submitted(first.GetAppended())
	return receiveEvents(ctx, rec.CommandID, 0, func() ([]byte, error) {
		msg, err := stream.Recv()
		return msg.GetEvent(), err
	}, fn)
}

// appendThenFollow is Run in two calls, for sidecars without Run.
func (c *Client) appendThenFollow(ctx context.Context, rec ioproto.Record, submitted func(appended bool), fn func(ioproto.Event) error) error {
	appended, err := c.Append(ctx, rec)
	if err != nil {
		return err
	}
	submitted(appended)
	return c.Follow(ctx, rec.CommandID, 0, fn)
}

// receiveEvents reads events with recv, checks each as Follow's doc says
// and calls fn with it, until the done event or the stream's end.
func receiveEvents(ctx context.Context, cmd string, afterSeq int64, recv func() ([]byte, error), fn func(ioproto.Event) error) error {
	last := max(afterSeq, 0)
	for {
		msg, err := recv()
		if err == io.EOF {
			// The sidecar ends a stream OK only at the done event; without
			// one, the done event's seq was not above afterSeq (iolog's
			// Drain): there was nothing left to send.
			return nil
		}
		if err != nil {
			return errorOf(ctx, callFollow, err)
		}
		ev, err := ioproto.ParseEvent(msg)
		if err != nil {
			return badResponse("command %s: %v", cmd, err)
		}
		if ev.Seq <= last {
			return badResponse("command %s: event seq %d after seq %d; events come in increasing order", cmd, ev.Seq, last)
		}
		if len(ev.Refs) > 0 {
			return badResponse("command %s: event %d refers to artifact files; the sidecar resolves them", cmd, ev.Seq)
		}
		last = ev.Seq
		if err := fn(ev); err != nil {
			return err
		}
		if ev.Type == ioproto.EventDone {
			return nil
		}
	}
}

// DriverStatus returns the driver's status (/io/driver.json). A driver
// that has not written it yet is core.ErrNotFound.
func (c *Client) DriverStatus(ctx context.Context) (ioproto.DriverStatus, error) {
	var ds ioproto.DriverStatus
	resp, err := c.rpc.Status(ctx, &sandboxiov1.StatusRequest{})
	if err != nil {
		return ds, errorOf(ctx, callStatus, err)
	}
	b := resp.GetDriverStatus()
	switch {
	case len(b) == 0:
		return ds, &Error{Code: codes.NotFound, Message: "the driver has not written its status yet", kind: core.ErrNotFound}
	case len(b) > maxDriverStatus:
		return ds, badResponse("driver status is %d bytes; the limit is %d", len(b), maxDriverStatus)
	}
	if err := json.Unmarshal(b, &ds); err != nil {
		return ioproto.DriverStatus{}, badResponse("driver status: %v", err)
	}
	return ds, nil
}

// display is a file's path as the caller gives it (/workspace/..., or
// /... on a volume).
func display(t wspath.Tree, fi core.FileInfo) string {
	if fi.Path == "" {
		return t.Display(".")
	}
	return t.Display(fi.Path)
}

// checkInfo checks a file description of /workspace from the sidecar
// (checkInfoIn).
func checkInfo(p *sandboxiov1.FileInfo) (core.FileInfo, error) {
	return checkInfoIn(wspath.Workspace, p)
}

// checkInfoIn checks a file description from the sidecar and turns it
// into the domain's: its path must be absolute and in tree t by its rule
// (core.CleanPath: under /workspace; core.CleanVolumePath) and becomes
// relative, "" for the tree's root, as wspath.Info gives it; its size may
// not be negative.
func checkInfoIn(t wspath.Tree, p *sandboxiov1.FileInfo) (core.FileInfo, error) {
	if p == nil {
		return core.FileInfo{}, badResponse("a file description is missing")
	}
	if !utf8.ValidString(p.GetPath()) {
		return core.FileInfo{}, badResponse("file path %q is not valid UTF-8", core.Truncate(p.GetPath(), 256))
	}
	if !strings.HasPrefix(p.GetPath(), "/") {
		return core.FileInfo{}, badResponse("file path %q is not absolute", core.Truncate(p.GetPath(), 256))
	}
	rel, err := t.Clean(p.GetPath())
	if err != nil {
		return core.FileInfo{}, badResponse("file path: %v", err)
	}
	if p.GetSize() < 0 {
		return core.FileInfo{}, badResponse("file %s has a negative size", t.Display(rel))
	}
	mode := fs.FileMode(p.GetMode())
	fi := core.FileInfo{Path: rel, Size: p.GetSize(), IsDir: mode.IsDir(), ModTime: time.Unix(0, p.GetModTimeUnixNano()),
		Mode: mode, Type: core.FileTypeOf(mode), UID: p.GetUid(), GID: p.GetGid()}
	if rel == "." {
		fi.Path = ""
	}
	return fi, nil
}

// Upload writes r to path under /workspace (replacing a file of that name,
// creating missing parents), refusing more than maxBytes
// (core.ErrResourceExhausted; 0 leaves the sidecar's own cap). path is
// relative to /workspace or absolute under it.
func (c *Client) Upload(ctx context.Context, path string, r io.Reader, maxBytes int64) (core.FileInfo, error) {
	return c.upload(ctx, wspath.Workspace, &sandboxiov1.UploadHeader{Path: path, MaxBytes: maxBytes}, r)
}

// upload sends an upload of r under h, to the tree t it names.
func (c *Client) upload(ctx context.Context, t wspath.Tree, h *sandboxiov1.UploadHeader, r io.Reader) (core.FileInfo, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Upload(ctx)
	if err != nil {
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	hdr := &sandboxiov1.UploadRequest{Msg: &sandboxiov1.UploadRequest_Header{Header: h}}
	if err := stream.Send(hdr); err != nil {
		_, err = stream.CloseAndRecv() // the server's error, if it sent one
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	buf := make([]byte, uploadChunk)
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			if err := stream.Send(&sandboxiov1.UploadRequest{Msg: &sandboxiov1.UploadRequest_Chunk{Chunk: buf[:n]}}); err != nil {
				// io.EOF: the server ended the call (too large, bad path);
				// CloseAndRecv returns its status.
				_, err = stream.CloseAndRecv()
				return core.FileInfo{}, errorOf(ctx, callFiles, err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return core.FileInfo{}, rerr // the caller's reader: theirs to report
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	return checkInfoIn(t, resp.GetFile())
}

// Download opens a regular file under /workspace. The reader returns at
// most the size the file description gives (more is ErrBadResponse, and so
// is less: a truncated stream is never mistaken for the whole file); close
// it to end the stream.
func (c *Client) Download(ctx context.Context, path string) (io.ReadCloser, core.FileInfo, error) {
	return c.download(ctx, wspath.Workspace, &sandboxiov1.DownloadRequest{Path: path})
}

// download opens the download req asks for, in tree t.
func (c *Client) download(ctx context.Context, t wspath.Tree, req *sandboxiov1.DownloadRequest) (io.ReadCloser, core.FileInfo, error) {
	path := req.GetPath()
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.Download(ctx, req)
	if err != nil {
		err = errorOf(ctx, callFiles, err)
		cancel()
		return nil, core.FileInfo{}, err
	}
	first, err := stream.Recv()
	if err != nil {
		if err == io.EOF {
			err = badResponse("download %s: no file description", core.Truncate(path, 256))
		} else {
			err = errorOf(ctx, callFiles, err)
		}
		cancel()
		return nil, core.FileInfo{}, err
	}
	fi, err := checkInfoIn(t, first.GetFile())
	if err != nil {
		cancel()
		return nil, core.FileInfo{}, err
	}
	d := &download{ctx: ctx, cancel: cancel, stream: stream, left: fi.Size, pending: first.GetChunk(), path: display(t, fi)}
	if int64(len(d.pending)) > d.left {
		cancel()
		return nil, core.FileInfo{}, badResponse("download %s: more content than its size %d", d.path, fi.Size)
	}
	d.left -= int64(len(d.pending))
	return d, fi, nil
}

// download reads a Download stream.
type download struct {
	ctx     context.Context
	cancel  context.CancelFunc
	stream  grpc.ServerStreamingClient[sandboxiov1.DownloadResponse]
	left    int64 // bytes still expected after pending
	pending []byte
	path    string
	err     error
}

func (d *download) Read(p []byte) (int, error) {
	for len(d.pending) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		msg, err := d.stream.Recv()
		switch {
		case err == io.EOF && d.left == 0:
			d.err = io.EOF
		case err == io.EOF:
			d.err = badResponse("download %s: the stream ended %d bytes short of the file's size", d.path, d.left)
		case err != nil:
			d.err = errorOf(d.ctx, callFiles, err)
		case msg.GetFile() != nil:
			d.err = badResponse("download %s: a second file description", d.path)
		case int64(len(msg.GetChunk())) > d.left:
			d.err = badResponse("download %s: more content than the file's size", d.path)
		default:
			d.pending = msg.GetChunk()
			d.left -= int64(len(d.pending))
		}
	}
	n := copy(p, d.pending)
	d.pending = d.pending[n:]
	return n, nil
}

func (d *download) Close() error {
	d.cancel()
	if d.err == nil {
		d.err = errors.New("download closed")
	}
	return nil
}

// ListFiles lists a directory under /workspace ("" for /workspace) over
// depth levels (0 and 1: its children; at most core.MaxListDepth), sorted
// by path, or returns just the file path names.
func (c *Client) ListFiles(ctx context.Context, path string, depth int) ([]core.FileInfo, error) {
	return c.listFiles(ctx, wspath.Workspace, "", path, depth)
}

// listFiles lists path in tree t (on volume, or "": /workspace).
func (c *Client) listFiles(ctx context.Context, t wspath.Tree, volume, path string, depth int) ([]core.FileInfo, error) {
	if depth < 0 || depth > core.MaxListDepth {
		return nil, core.Invalidf("list depth %d is out of range: give 0 to %d", depth, core.MaxListDepth)
	}
	resp, err := c.rpc.ListFiles(ctx, &sandboxiov1.ListFilesRequest{Path: path, Depth: uint32(depth), Volume: volume})
	if err != nil {
		return nil, errorOf(ctx, callFiles, err)
	}
	if len(resp.GetFiles()) > wspath.MaxListEntries {
		return nil, badResponse("list %s: %d entries; the limit is %d", core.Truncate(path, 256), len(resp.GetFiles()), wspath.MaxListEntries)
	}
	out := make([]core.FileInfo, 0, len(resp.GetFiles()))
	for _, p := range resp.GetFiles() {
		fi, err := checkInfoIn(t, p)
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	return out, nil
}

// MakeDirectory creates directory path under /workspace and describes it:
// with parents, missing parents are created and an existing directory is
// answered as it is (mkdir -p); without, a missing parent is
// core.ErrNotFound and an existing path core.ErrAlreadyExists.
func (c *Client) MakeDirectory(ctx context.Context, path string, parents bool) (core.FileInfo, error) {
	resp, err := c.rpc.MakeDirectory(ctx, &sandboxiov1.MakeDirectoryRequest{Path: path, Parents: parents})
	if err != nil {
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	return checkInfo(resp.GetFile())
}

// Remove deletes path under /workspace (a symbolic link, not its target);
// a non-empty directory needs recursive (core.ErrFailedPrecondition
// otherwise).
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	if _, err := c.rpc.Remove(ctx, &sandboxiov1.RemoveRequest{Path: path, Recursive: recursive}); err != nil {
		return errorOf(ctx, callFiles, err)
	}
	return nil
}

// Rename moves from to to within /workspace and describes the file at its
// new path; an existing destination is core.ErrAlreadyExists unless
// overwrite is set.
func (c *Client) Rename(ctx context.Context, from, to string, overwrite bool) (core.FileInfo, error) {
	resp, err := c.rpc.Rename(ctx, &sandboxiov1.RenameRequest{From: from, To: to, Overwrite: overwrite})
	if err != nil {
		return core.FileInfo{}, errorOf(ctx, callFiles, err)
	}
	return checkInfo(resp.GetFile())
}

// ArchiveStats is what an Export or Import reports.
type ArchiveStats struct {
	// Bytes counts the content bytes of the archive's regular files,
	// globals included.
	Bytes int64
	// Skipped lists entries not kept, each "path: why"; at most
	// maxArchiveSkipped of at most maxSkippedLen bytes, valid UTF-8.
	Skipped []string
	// SkippedCount counts every entry not kept.
	SkippedCount int64
}

// Bounds on what an Export or Import reports.
const (
	maxArchiveSkipped = 20
	maxSkippedLen     = 256
)

// archiveStats checks and bounds the stats a sidecar reported.
func archiveStats(op string, bytes int64, skipped []string, count int64) (ArchiveStats, error) {
	if bytes < 0 || count < 0 {
		return ArchiveStats{}, badResponse("%s: negative stats (%d bytes, %d skipped)", op, bytes, count)
	}
	st := ArchiveStats{Bytes: bytes, SkippedCount: max(count, int64(len(skipped)))}
	for _, s := range skipped[:min(len(skipped), maxArchiveSkipped)] {
		st.Skipped = append(st.Skipped, clip(sanitize(s), maxSkippedLen))
	}
	return st, nil
}

// clip cuts valid UTF-8 s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Export streams the sandbox's workspace archive (orchestrator/backend/hostio/wsarchive)
// into w, with the globals file named globals (in /io/hibernate; empty:
// none) as its first entry; the sidecar removes that file once the
// archive is sent. maxBytes bounds the archive's content (0:
// wsarchive.DefaultMaxBytes; more is core.ErrResourceExhausted), and what
// the Client accepts is bounded by the same limits with the framing
// (wsarchive.Limits.MaxArchiveBytes): the sidecar is in a hostile Pod. A
// stream that ends before the sidecar says the archive is complete is
// ErrBadResponse; w's errors are returned as they are. On error w holds
// part of an archive.
func (c *Client) Export(ctx context.Context, globals string, maxBytes int64, w io.Writer) (ArchiveStats, error) {
	if maxBytes < 0 {
		return ArchiveStats{}, core.Invalidf("export: max bytes is negative (%d)", maxBytes)
	}
	if maxBytes == 0 {
		maxBytes = wsarchive.DefaultMaxBytes
	}
	bound := wsarchive.Limits{MaxBytes: maxBytes}.MaxArchiveBytes()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when w fails
	stream, err := c.rpc.Export(ctx, &sandboxiov1.ExportRequest{Globals: globals, MaxBytes: maxBytes})
	if err != nil {
		return ArchiveStats{}, errorOf(ctx, callFiles, err)
	}
	var n int64
	for {
		msg, err := stream.Recv()
		switch {
		case err == io.EOF:
			return ArchiveStats{}, badResponse("export: the stream ended before the archive was complete (%d bytes)", n)
		case err != nil:
			return ArchiveStats{}, errorOf(ctx, callFiles, err)
		case int64(len(msg.GetChunk())) > bound-n:
			return ArchiveStats{}, &Error{Code: codes.ResourceExhausted, kind: core.ErrResourceExhausted,
				Message: fmt.Sprintf("export: the archive is larger than %d bytes, the most %d bytes of content take", bound, maxBytes)}
		case !msg.GetDone() && (msg.GetBytes() != 0 || len(msg.GetSkipped()) > 0 || msg.GetSkippedCount() != 0):
			return ArchiveStats{}, badResponse("export: stats before the archive's end")
		}
		n += int64(len(msg.GetChunk()))
		if _, err := w.Write(msg.GetChunk()); err != nil {
			return ArchiveStats{}, err
		}
		if !msg.GetDone() {
			continue
		}
		if msg.GetBytes() > n {
			return ArchiveStats{}, badResponse("export: %d bytes of content in an archive of %d bytes", msg.GetBytes(), n)
		}
		st, err := archiveStats("export", msg.GetBytes(), msg.GetSkipped(), msg.GetSkippedCount())
		if err != nil {
			return ArchiveStats{}, err
		}
		switch _, err := stream.Recv(); {
		case err == nil:
			return ArchiveStats{}, badResponse("export: a message after the archive's end")
		case err != io.EOF:
			return ArchiveStats{}, errorOf(ctx, callFiles, err)
		}
		return st, nil
	}
}

// Import sends archive r (one Export made) to the sandbox: the sidecar
// extracts it into /workspace, and its globals entry into
// /io/hibernate/<globals> (empty: the archive must have none; a name
// without a globals entry is core.ErrInvalidArgument too). maxBytes
// bounds the archive's content (0: the sidecar's default; more is
// core.ErrResourceExhausted); a malformed or hostile archive is
// core.ErrInvalidArgument. r's errors are returned as they are.
func (c *Client) Import(ctx context.Context, globals string, r io.Reader, maxBytes int64) (ArchiveStats, error) {
	if maxBytes < 0 {
		return ArchiveStats{}, core.Invalidf("import: max bytes is negative (%d)", maxBytes)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.rpc.Import(ctx)
	if err != nil {
		return ArchiveStats{}, errorOf(ctx, callFiles, err)
	}
	msg := &sandboxiov1.ImportRequest{Globals: globals, MaxBytes: maxBytes} // the header, with the first chunk
	for first := true; ; first = false {
		buf := make([]byte, uploadChunk) // a new one each time: gRPC may use a message after Send returns
		n, rerr := io.ReadFull(r, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return ArchiveStats{}, rerr // the caller's reader: theirs to report
		}
		if n > 0 || first {
			msg.Chunk = buf[:n]
			if err := stream.Send(msg); err != nil {
				// io.EOF: the server ended the call (a bad archive, a
				// limit passed); CloseAndRecv returns its status.
				_, err = stream.CloseAndRecv()
				return ArchiveStats{}, errorOf(ctx, callFiles, err)
			}
		}
		msg = &sandboxiov1.ImportRequest{}
		if rerr != nil {
			break
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return ArchiveStats{}, errorOf(ctx, callFiles, err)
	}
	return archiveStats("import", resp.GetBytes(), resp.GetSkipped(), resp.GetSkippedCount())
}
