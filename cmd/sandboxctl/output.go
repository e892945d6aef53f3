package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/plotlyjs"
	"github.com/sandboxd/sandboxd/internal/termsafe"
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

// formatFlag is the -o flag: table (the default), wide or json.
type formatFlag string

func (f *formatFlag) String() string { return string(*f) }

// Set implements flag.Value.
func (f *formatFlag) Set(s string) error {
	switch s {
	case "table", "wide", "json":
		*f = formatFlag(s)
		return nil
	}
	return fmt.Errorf("output format %q: want table, wide or json", s)
}

// register adds -o (and --output) to fs.
func (f *formatFlag) register(fs *flag.FlagSet) {
	*f = "table"
	fs.Var(f, "o", "output format: table, wide or json")
	fs.Var(f, "output", "output format: table, wide or json")
}

// writeJSONList prints messages as a JSON array (easier for jq than a
// response wrapper); an empty list is [].
func writeJSONList[M proto.Message](w io.Writer, sbs []M) error {
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
	_, err := w.Write(termsafe.JSON(out.Bytes())) // DEL, C1 and bidi controls as \uXXXX too
	return err
}

// writeTable prints sandboxes as an aligned table; wide adds the state's
// reason and the limits.
func writeTable(w io.Writer, sbs []*sandboxv1.Sandbox, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	withMD := anyMetadata(sbs) || wide // the column appears only when there is something to show
	fmt.Fprint(tw, "ID\tTENANT\tUSER\tSTATE\tCREATED\tLAST ACTIVE\tEXPIRES\tIMAGE")
	if wide {
		fmt.Fprint(tw, "\tREASON\tMEMORY")
	}
	if withMD {
		fmt.Fprint(tw, "\tMETADATA")
	}
	fmt.Fprintln(tw)
	for _, sb := range sbs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s",
			termsafe.Field(sb.GetSandboxId()), termsafe.Field(sb.GetTenant()), termsafe.Field(sb.GetUserId()), sandboxStateLabel(sb),
			formatTime(sb.GetCreatedAt()), formatTime(sb.GetLastActiveAt()), formatTime(sb.GetExpiresAt()),
			termsafe.Field(sb.GetImage()))
		if wide {
			mem := "-"
			if m := sb.GetLimits().GetMemoryBytes(); m > 0 {
				mem = fmt.Sprintf("%d MiB", m>>20)
			}
			fmt.Fprintf(tw, "\t%s\t%s", orDash(termsafe.Field(sb.GetStateReason())), mem)
		}
		if withMD {
			fmt.Fprint(tw, "\t"+orDash(formatMetadata(sb.GetMetadata())))
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
	// saveDir, if set, is where figures and charts are written.
	saveDir string
	// commandID names the saved files.
	commandID string
	// seqs prefixes each event with its seq.
	seqs bool
	// lastSeq is the last event seen, for resuming after a broken stream.
	lastSeq int64
	done    *client.Done
	// seq is the event being printed; saved counts the files written.
	seq, saved int64
	// saveErr is the first failure to save a file.
	saveErr error
}

// print handles one event.
func (p *eventPrinter) print(ev client.Event) {
	p.lastSeq = ev.Seq
	if p.seqs {
		w := p.stdout
		if ev.Kind == client.KindStderr || ev.Kind == client.KindError {
			w = p.stderr
		}
		fmt.Fprintf(w, "[seq %d %s] ", ev.Seq, ev.Kind)
		if ev.Kind == client.KindDone && ev.Done != nil {
			fmt.Fprintf(w, "%s\n", termsafe.Field(string(ev.Done.Status)))
		}
	}
	p.seq = ev.Seq
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

// printBundle shows a MIME bundle as a terminal can: a plotly figure as a
// one-line summary, binary values (images) as a placeholder with their size,
// otherwise the text/plain form, otherwise a placeholder for the first
// type. With a save directory, figures and charts are written there too.
func (p *eventPrinter) printBundle(data map[string]string) {
	types := make([]string, 0, len(data))
	for t := range data {
		types = append(types, t)
	}
	sort.Strings(types)
	shown := false
	if html, ok := data["text/html"]; ok && isPlotly(html) {
		fmt.Fprintf(p.stdout, "[plotly figure: %s%s]\n", plotlySummary(data["text/plain"]), p.save("chart", ".html", func() []byte {
			return plotlyjs.Standalone("plotly chart "+p.commandID, html)
		}))
		shown = true
	}
	for _, t := range types {
		if isBinaryMIME(t) || t == "image/svg+xml" {
			fmt.Fprintf(p.stdout, "[%s %d bytes%s]\n", termsafe.Field(t), decodedLen(data[t]), p.save("figure", extension(t), func() []byte { return decoded(t, data[t]) }))
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
		fmt.Fprintf(p.stdout, "[%s %d bytes]\n", termsafe.Field(types[0]), len(data[types[0]]))
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

// save writes a figure to the save directory as COMMAND-SEQ-KIND.EXT and
// returns the note to print: where it went, or how to keep it.
func (p *eventPrinter) save(kind, ext string, content func() []byte) string {
	if p.saveDir == "" {
		return "; --save DIR keeps it"
	}
	name := filepath.Join(p.saveDir, fmt.Sprintf("%s-%d-%s%s", safeName(p.commandID), p.seq, kind, ext))
	if err := os.WriteFile(name, content(), 0o644); err != nil {
		if p.saveErr == nil {
			p.saveErr = err
		}
		return "; not saved: " + err.Error()
	}
	p.saved++
	return " saved to " + name
}

// safeName keeps a command ID usable as part of a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r == 0 || r == os.PathSeparator {
			return '_'
		}
		return r
	}, s)
}

func extension(mime string) string {
	switch mime {
	case "image/png":
		return ".png"
	case "image/jpeg":
		return ".jpg"
	case "image/gif":
		return ".gif"
	case "image/svg+xml":
		return ".svg"
	case "application/pdf":
		return ".pdf"
	}
	return ".bin"
}

// decoded is a bundle value's bytes: base64-decoded for binary types.
func decoded(mime, v string) []byte {
	if isBinaryMIME(mime) {
		if b, err := base64.StdEncoding.DecodeString(v); err == nil {
			return b
		}
	}
	return []byte(v)
}

// isPlotly says an HTML output is a plotly chart.
func isPlotly(html string) bool {
	return strings.Contains(html, "Plotly.newPlot") || strings.Contains(html, "plotly-graph-div")
}

var (
	plotlyTraceType = regexp.MustCompile(`'type': '([a-z0-9_]+)'`)
	plotlyTitle     = regexp.MustCompile(`'title': \{'text': '((?:[^'\\]|\\.)*)'`)
)

// plotlySummary describes a figure from its text/plain form (plotly.py's
// "Figure({...})" repr) in a few words: trace types and title.
func plotlySummary(repr string) string {
	if i := strings.Index(repr, "'layout'"); i >= 0 {
		data, layout := repr[:i], repr[i:]
		counts := map[string]int{}
		var order []string
		for _, m := range plotlyTraceType.FindAllStringSubmatch(data, -1) {
			if counts[m[1]] == 0 {
				order = append(order, m[1])
			}
			counts[m[1]]++
		}
		var parts []string
		for _, t := range order {
			parts = append(parts, fmt.Sprintf("%d %s", counts[t], t))
		}
		out := "traces: " + strings.Join(parts, ", ")
		if len(parts) == 0 {
			out = "no traces"
		}
		if m := plotlyTitle.FindStringSubmatch(layout); m != nil {
			out = fmt.Sprintf("%q, %s", m[1], out)
		}
		return out
	}
	return "interactive chart"
}

// decodedLen is the size of a base64 value once decoded (the size of the
// image), or of the raw string if it is not valid base64.
func decodedLen(s string) int {
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return len(b)
	}
	return len(s)
}
