package audit

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Bounds of a query.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
	// maxScanBytes bounds the log read by one call: past it the page
	// ends, possibly short or empty, with a token to continue. It keeps a
	// query for a rare record from reading a whole gigabyte at once.
	maxScanBytes = 32 << 20
)

// ErrOtherTenant is Query's answer to a user (not admin) caller asking for
// another tenant's records: the door reports it as PERMISSION_DENIED
// rather than quietly answering with the caller's own, so a mistaken
// filter is not mistaken for an empty trail.
var ErrOtherTenant = errors.New("a user token reads only its own tenant's audit events; another tenant's need an admin token")

// Filter selects records; zero fields select all.
type Filter struct {
	Tenant    string
	SandboxID string
	Action    string
	// Since and Until bound the records' time: Since <= Time < Until.
	Since, Until time.Time
	PageSize     int
	PageToken    string
}

// Page is a query's answer: records oldest first, and the token to the
// next page, empty once the log's end is reached.
type Page struct {
	Events        []Event
	NextPageToken string
}

func (f Filter) match(e Event) bool {
	return (f.Tenant == "" || e.Tenant == f.Tenant) &&
		(f.SandboxID == "" || e.SandboxID == f.SandboxID) &&
		(f.Action == "" || e.Action == f.Action) &&
		(f.Since.IsZero() || !e.Time.Before(f.Since)) &&
		(f.Until.IsZero() || e.Time.Before(f.Until))
}

// file is one file of the log, identified by the time of its first record,
// which rotation (a rename) does not change: a page token names a file so
// and stays valid while the file is rotated.
type file struct {
	path  string
	first int64 // unix nanoseconds of the first record; 0: empty
}

// files returns the log's files, oldest first: the rotated ones by name
// (their names hold their rotation time), then the current one.
func (l *Log) files() ([]file, error) {
	names, err := filepath.Glob(filepath.Join(l.cfg.Dir, "audit-*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	names = append(names, filepath.Join(l.cfg.Dir, FileName))
	var fs []file
	for _, n := range names {
		first, err := firstTime(n)
		if errors.Is(err, os.ErrNotExist) {
			continue // rotated away meanwhile
		}
		if err != nil {
			return nil, err
		}
		fs = append(fs, file{path: n, first: first})
	}
	return fs, nil
}

// firstTime reads the time of a file's first record (0 for an empty file).
func firstTime(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err == io.EOF && len(line) == 0 {
		return 0, nil
	}
	var e Event
	if jerr := json.Unmarshal(line, &e); jerr != nil {
		return 0, nil // a damaged first line: the file sorts first
	}
	return e.Time.UnixNano(), nil
}

// Query returns the records f selects that the caller (core.CallerOf) may
// read: an admin reads every tenant's (and the log's dropped records), a
// user only its own tenant's; a user's filter naming another tenant is
// ErrOtherTenant. Records come oldest first, at most f.PageSize
// (DefaultPageSize when 0, at most MaxPageSize); one call reads at most a
// few tens of MiB of the log, so a page may be short, even empty, with a
// NextPageToken: page until the token is empty. A query sees every call
// recorded before it began (it waits for the writer to write them, within
// ctx). A token outlives rotation;
// one whose file was deleted since resumes at the oldest file kept.
func (l *Log) Query(ctx context.Context, f Filter) (Page, error) {
	c := core.CallerOf(ctx)
	if !c.Admin {
		if f.Tenant != "" && f.Tenant != c.Tenant {
			return Page{}, ErrOtherTenant
		}
		f.Tenant = c.Tenant
	}
	switch {
	case f.PageSize < 0:
		return Page{}, core.Invalidf("page_size %d is negative", f.PageSize)
	case f.PageSize == 0:
		f.PageSize = DefaultPageSize
	case f.PageSize > MaxPageSize:
		f.PageSize = MaxPageSize
	}
	fileID, offset, err := parseToken(f.PageToken)
	if err != nil {
		return Page{}, err
	}
	if err := l.flush(ctx); err != nil {
		return Page{}, err
	}
	fs, err := l.files()
	if err != nil {
		return Page{}, fmt.Errorf("audit: %w", err)
	}
	var page Page
	budget := int64(maxScanBytes)
	for i, fl := range fs {
		switch {
		case fl.first < fileID:
			continue // read by earlier pages
		case fl.first > fileID:
			offset = 0 // the token's file is gone or done: start this one
		}
		if i+1 < len(fs) && !f.Since.IsZero() && fs[i+1].first != 0 && fs[i+1].first < f.Since.UnixNano() {
			continue // every record here is older than Since
		}
		if !f.Until.IsZero() && fl.first >= f.Until.UnixNano() {
			break // this file and the later ones are past Until
		}
		if err := ctx.Err(); err != nil {
			return Page{}, err
		}
		next, full, err := scan(fl.path, offset, f, &page.Events, &budget)
		if err != nil {
			return Page{}, fmt.Errorf("audit: %w", err)
		}
		if full || budget <= 0 {
			page.NextPageToken = token(fl.first, next)
			return page, nil
		}
	}
	return page, nil
}

// scan reads path's records from offset, appending the matching ones to
// out until the page is full or the budget is spent, and returns the offset
// after the last record read and whether the page is full.
func scan(path string, offset int64, f Filter, out *[]Event, budget *int64) (next int64, full bool, err error) {
	fh, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return offset, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	defer fh.Close()
	if _, err := fh.Seek(offset, io.SeekStart); err != nil {
		return 0, false, err
	}
	r := bufio.NewReader(fh)
	for *budget > 0 && len(*out) < f.PageSize {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 || line[len(line)-1] != '\n' {
			// The end, or a record the writer is still writing: the next
			// page reads it whole.
			return offset, false, nil
		}
		offset += int64(len(line))
		*budget -= int64(len(line))
		var e Event
		if json.Unmarshal(line, &e) == nil && f.match(e) {
			*out = append(*out, e)
		}
		if err != nil {
			return offset, false, nil
		}
	}
	return offset, len(*out) >= f.PageSize, nil
}

// A page token is the file's first-record time and an offset in it,
// base64'd so callers treat it as opaque.
func token(fileID, offset int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(fileID, 10) + ":" + strconv.FormatInt(offset, 10)))
}

func parseToken(t string) (fileID, offset int64, err error) {
	if t == "" {
		return 0, 0, nil
	}
	bad := core.Invalidf("page_token is not one this server returned")
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil {
		return 0, 0, bad
	}
	a, o, ok := strings.Cut(string(b), ":")
	if !ok {
		return 0, 0, bad
	}
	if fileID, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, bad
	}
	if offset, err = strconv.ParseInt(o, 10, 64); err != nil || offset < 0 {
		return 0, 0, bad
	}
	return fileID, offset, nil
}
