package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// displayLoc is the time zone of table output; tests pin it.
var displayLoc = time.Local

// jsonOpts prints proto field names (sandbox_id, as in the .proto and every
// other client) and every field, so scripts can rely on the keys.
var jsonOpts = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// writeJSON prints one message as indented JSON. protojson's own spacing is
// deliberately unstable, so it is re-indented with encoding/json.
func writeJSON(w io.Writer, m proto.Message) error {
	b, err := jsonOpts.Marshal(m)
	if err != nil {
		return err
	}
	return writeIndented(w, b)
}

// writeJSONList prints sandboxes as a JSON array (easier for jq than the
// response wrapper); an empty list is [].
func writeJSONList(w io.Writer, sbs []*sandboxv1.Sandbox) error {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i, sb := range sbs {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := jsonOpts.Marshal(sb)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	buf.WriteByte(']')
	return writeIndented(w, buf.Bytes())
}

func writeIndented(w io.Writer, b []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// writeTable prints sandboxes as an aligned table.
func writeTable(w io.Writer, sbs []*sandboxv1.Sandbox) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	withMD := anyMetadata(sbs) // the column appears only when there is something to show
	fmt.Fprint(tw, "ID\tTENANT\tUSER\tSTATE\tCREATED\tLAST ACTIVE\tEXPIRES\tIMAGE")
	if withMD {
		fmt.Fprint(tw, "\tMETADATA")
	}
	fmt.Fprintln(tw)
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s",
			sb.GetSandboxId(), sb.GetTenant(), sb.GetUserId(), sandboxStateLabel(sb),
			formatTime(sb.GetCreatedAt()), formatTime(sb.GetLastActiveAt()), formatTime(sb.GetExpiresAt()),
			sb.GetImage())
		if withMD {
			fmt.Fprint(tw, "\t"+formatMetadata(sb.GetMetadata()))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// stateName is the lower-case name of a state ("running"), as --state takes.
func stateName(s sandboxv1.SandboxState) string {
	name := strings.TrimPrefix(s.String(), "SANDBOX_STATE_")
	return strings.ToLower(name)
}

func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().In(displayLoc).Format("2006-01-02 15:04:05")
}

// eventPrinter writes a command's events to a terminal: output streams go to
// the matching stream as they arrive, rich outputs as text, errors to stderr.
type eventPrinter struct {
	stdout, stderr io.Writer
	// lastSeq is the last event seen, for resuming after a broken stream.
	lastSeq int64
	done    *client.Done
}

// print handles one event.
func (p *eventPrinter) print(ev client.Event) {
	p.lastSeq = ev.Seq
	switch ev.Kind {
	case client.KindStdout:
		io.WriteString(p.stdout, ev.Text)
	case client.KindStderr:
		io.WriteString(p.stderr, ev.Text)
	case client.KindDisplay, client.KindResult:
		p.printBundle(ev.Data)
	case client.KindError:
		p.printError(ev.Error)
	case client.KindDone:
		p.done = ev.Done
	}
}

// printBundle shows a MIME bundle as a terminal can: binary values (images)
// as a placeholder with their size, otherwise the text/plain form, otherwise
// a placeholder for the first type.
func (p *eventPrinter) printBundle(data map[string]string) {
	types := make([]string, 0, len(data))
	for t := range data {
		types = append(types, t)
	}
	sort.Strings(types)
	shown := false
	for _, t := range types {
		if isBinaryMIME(t) {
			fmt.Fprintf(p.stdout, "[%s %d bytes]\n", t, decodedLen(data[t]))
			shown = true
		}
	}
	if shown {
		return
	}
	if text, ok := data["text/plain"]; ok {
		io.WriteString(p.stdout, text)
		if !strings.HasSuffix(text, "\n") {
			io.WriteString(p.stdout, "\n")
		}
		return
	}
	if len(types) > 0 {
		fmt.Fprintf(p.stdout, "[%s %d bytes]\n", types[0], len(data[types[0]]))
	}
}

// printError prints a traceback as the interpreter would, or "ename: evalue"
// when there is none.
func (p *eventPrinter) printError(e *client.ExecError) {
	if len(e.Traceback) == 0 {
		fmt.Fprintf(p.stderr, "%s: %s\n", e.Name, e.Value)
		return
	}
	for _, line := range e.Traceback {
		io.WriteString(p.stderr, line)
		if !strings.HasSuffix(line, "\n") {
			io.WriteString(p.stderr, "\n")
		}
	}
}

// isBinaryMIME mirrors the /io protocol's rule: images (except SVG), PDF and
// octet streams travel as base64.
func isBinaryMIME(t string) bool {
	switch {
	case t == "image/svg+xml":
		return false
	case strings.HasPrefix(t, "image/"), t == "application/pdf", t == "application/octet-stream":
		return true
	}
	return false
}

// decodedLen is the size of a base64 value once decoded (the size of the
// image), or of the raw string if it is not valid base64.
func decodedLen(s string) int {
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return len(b)
	}
	return len(s)
}
