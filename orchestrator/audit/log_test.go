package audit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// readAll reads every record of the log's files, oldest first.
func readAll(t *testing.T, l *Log) []Event {
	t.Helper()
	fs, err := l.files()
	if err != nil {
		t.Fatal(err)
	}
	var es []Event
	for _, f := range fs {
		fh, err := os.Open(f.path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var e Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: %v", f.path, err)
			}
			es = append(es, e)
		}
		fh.Close()
	}
	return es
}

// TestDropPolicy: with the writer stalled, Record neither blocks nor
// grows memory past the queue: the surplus is counted, and once the writer
// runs a dropped record with the count precedes the queued records.
func TestDropPolicy(t *testing.T) {
	hold := make(chan struct{})
	l, err := open(Config{Dir: t.TempDir(), QueueLen: 4}, hold)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		l.Record(Event{Time: time.Now(), Action: ActionDelete, SandboxID: fmt.Sprint(i), Outcome: OutcomeOK})
	}
	if n := l.Dropped(); n != 6 {
		t.Errorf("Dropped = %d; want 6", n)
	}
	close(hold)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	es := readAll(t, l)
	if len(es) != 5 || es[0].Action != ActionDropped || es[0].Dropped != 6 || es[0].Tenant != "" {
		t.Fatalf("records = %+v; want a dropped record of 6, then the 4 queued", es)
	}
	for i, e := range es[1:] {
		if e.SandboxID != fmt.Sprint(i) {
			t.Errorf("record %d is %+v; want the %dth recorded", i+1, e, i)
		}
	}
	l.Record(Event{Action: ActionDelete}) // after Close: dropped, no panic
	if l.Dropped() != 7 {
		t.Errorf("a record after Close was not counted as dropped")
	}
}

// TestRotation: the log rotates at MaxFileBytes and keeps at most MaxFiles
// files, each at most MaxFileBytes (plus one record), and Query still
// reads what remains in order.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Config{Dir: dir, MaxFileBytes: 1 << 20, MaxFiles: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pad := strings.Repeat("p", 200)
	const n = 20000 // about 5 MiB: four rotations
	for i := range n {
		l.write(Event{Time: time.Unix(0, int64(i+1)), Action: ActionMkdir, Path: pad, SandboxID: fmt.Sprint(i), Outcome: OutcomeOK})
	}
	// lumberjack deletes the oldest files on a goroutine of its own after
	// each rotation: wait for it to have done so.
	var names []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		names, _ = filepath.Glob(filepath.Join(dir, "*"))
		if len(names) <= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(names) != 3 {
		t.Fatalf("files = %v; want 3", names)
	}
	for _, name := range names {
		st, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > 1<<20 {
			t.Errorf("%s is %d bytes; want at most 1 MiB", name, st.Size())
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v; want no access for others", name, st.Mode().Perm())
		}
	}
	es := readAll(t, l)
	if len(es) < 6000 || es[len(es)-1].SandboxID != fmt.Sprint(n-1) {
		t.Fatalf("%d records kept, the last %+v; want the newest 2 MiB or so", len(es), es[len(es)-1])
	}
	for i := 1; i < len(es); i++ {
		if es[i].Time.Before(es[i-1].Time) {
			t.Fatalf("records out of order at %d", i)
		}
	}
}

// TestQueryPaging: pages cover the log exactly once, oldest first, across
// rotated files, and a token taken before a rotation resumes where it left
// off.
func TestQueryPaging(t *testing.T) {
	l, err := Open(Config{Dir: t.TempDir(), MaxFileBytes: 1 << 20, MaxFiles: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pad := strings.Repeat("p", 200)
	i := 0
	write := func(k int) {
		for range k {
			i++
			l.write(Event{Time: time.Unix(0, int64(i)), Action: ActionMkdir, Path: pad, SandboxID: fmt.Sprint(i), Outcome: OutcomeOK})
		}
	}
	write(6000) // two files
	ctx := t.Context()
	var got []string
	p, err := l.Query(ctx, Filter{PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for ; ; p, err = l.Query(ctx, Filter{PageSize: 1000, PageToken: p.NextPageToken}) {
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p.Events {
			got = append(got, e.SandboxID)
		}
		if len(got) == 5000 {
			write(10000) // rotations while a token is held
		}
		if p.NextPageToken == "" {
			break
		}
	}
	if len(got) != 16000 {
		t.Fatalf("paged through %d records; want 16000", len(got))
	}
	for k, id := range got {
		if id != fmt.Sprint(k+1) {
			t.Fatalf("record %d is %s; want %d (each once, oldest first)", k, id, k+1)
		}
	}

	if _, err := l.Query(ctx, Filter{PageToken: "nonsense"}); !errors.Is(err, core.ErrInvalidArgument) {
		t.Errorf("a bad token: %v; want invalid argument", err)
	}
	if p, err := l.Query(ctx, Filter{PageSize: 5000}); err != nil || len(p.Events) != MaxPageSize {
		t.Errorf("page_size 5000 gave %d records (%v); want the cap, %d", len(p.Events), err, MaxPageSize)
	}
}

// TestQueryFilters: each filter, and tenant scoping by the caller.
func TestQueryFilters(t *testing.T) {
	l, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, e := range []Event{
		{Tenant: "acme", Action: ActionAcquire, SandboxID: "sb-a"},
		{Tenant: "acme", Action: ActionExecute, SandboxID: "sb-a"},
		{Tenant: "beta", Action: ActionAcquire, SandboxID: "sb-b"},
		{Action: ActionDropped, Dropped: 3},
		{Tenant: "acme", Action: ActionDelete, SandboxID: "sb-a"},
	} {
		e.Time, e.Outcome = base.Add(time.Duration(i)*time.Minute), OutcomeOK
		l.write(e)
	}
	admin := core.WithCaller(t.Context(), core.Caller{Tenant: "ops", Admin: true})
	acme := core.WithCaller(t.Context(), core.Caller{Tenant: "acme"})
	for _, tc := range []struct {
		name string
		user bool
		f    Filter
		want string
	}{
		{"admin, all", false, Filter{}, "acquire execute acquire dropped delete"},
		{"admin, tenant", false, Filter{Tenant: "beta"}, "acquire"},
		{"admin, sandbox", false, Filter{SandboxID: "sb-a"}, "acquire execute delete"},
		{"admin, action", false, Filter{Action: ActionAcquire}, "acquire acquire"},
		{"admin, since", false, Filter{Since: base.Add(2 * time.Minute)}, "acquire dropped delete"},
		{"admin, until", false, Filter{Until: base.Add(2 * time.Minute)}, "acquire execute"},
		{"user, all", true, Filter{}, "acquire execute delete"},
		{"user, own tenant", true, Filter{Tenant: "acme", Action: ActionDelete}, "delete"},
	} {
		ctx := admin
		if tc.user {
			ctx = acme
		}
		p, err := l.Query(ctx, tc.f)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var acts []string
		for _, e := range p.Events {
			acts = append(acts, e.Action)
		}
		if got := strings.Join(acts, " "); got != tc.want || p.NextPageToken != "" {
			t.Errorf("%s: %q (next %q); want %q", tc.name, got, p.NextPageToken, tc.want)
		}
	}
	if _, err := l.Query(acme, Filter{Tenant: "beta"}); !errors.Is(err, ErrOtherTenant) {
		t.Errorf("a user asking for another tenant: %v; want ErrOtherTenant", err)
	}
}

// TestQuerySeesRecorded: a query sees every record recorded before it
// began, though the writer writes them on its own goroutine.
func TestQuerySeesRecorded(t *testing.T) {
	l, err := Open(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 100 {
		l.Record(Event{Time: time.Now(), Tenant: "acme", Action: ActionExecute, CommandID: fmt.Sprint(i), Outcome: OutcomeOK})
		p, err := l.Query(t.Context(), Filter{PageSize: MaxPageSize})
		if err != nil || len(p.Events) != i+1 {
			t.Fatalf("after %d records a query saw %d (%v)", i+1, len(p.Events), err)
		}
	}
}
