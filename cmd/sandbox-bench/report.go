package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is one benchmark run: where it ran, with what sizes, and its rows.
type Report struct {
	Date          time.Time `json:"date"`
	CPUs          int       `json:"cpus"`
	Kernel        string    `json:"kernel"`
	DockerVersion string    `json:"docker_version"`
	Runtime       string    `json:"runtime"`
	Image         string    `json:"image"`
	Sandboxd      string    `json:"sandboxd"` // "self-started" or the --addr
	Sizes         Sizes     `json:"sizes"`
	Rows          []Row     `json:"rows"`
}

// Row is one figure: our value, the peer's for the same work, the ratio
// between them and the target.
type Row struct {
	// Key identifies the row for programs (stable across runs).
	Key    string `json:"key"`
	Metric string `json:"metric"`
	// Value is nil when the figure could not be measured (Note says why).
	Value *float64 `json:"value"`
	Unit  string   `json:"unit"`
	// Peer names what the figure is compared with, measured in the same
	// run; PeerValue is its figure in the same unit.
	Peer      string   `json:"peer,omitempty"`
	PeerValue *float64 `json:"peer_value,omitempty"`
	// Ratio is how many times better sandboxd is than the peer (below 1:
	// worse), in the row's direction; RatioText says it in words.
	Ratio     *float64 `json:"ratio,omitempty"`
	RatioText string   `json:"ratio_text,omitempty"`
	Target    string   `json:"target,omitempty"`
	// Met says whether Value meets Target; nil without a target or a value.
	Met  *bool  `json:"met,omitempty"`
	Note string `json:"note,omitempty"`
}

// metric describes how a kind of figure compares.
type metric struct {
	key, name, unit string
	lowerIsBetter   bool
	better, worse   string // words for the ratio: "faster"/"slower"
}

// target is a bound on a figure. ok gets the figure and its ratio to the
// peer (nil without one), since some targets are ratios.
type target struct {
	text string
	ok   func(v float64, ratio *float64) bool
}

func atMost(v float64, text string) *target {
	return &target{text: text, ok: func(x float64, _ *float64) bool { return x <= v }}
}

func atLeast(v float64, text string) *target {
	return &target{text: text, ok: func(x float64, _ *float64) bool { return x >= v }}
}

// ratioAtLeast is met when sandboxd is at least r times better than the peer.
func ratioAtLeast(r float64, text string) *target {
	return &target{text: text, ok: func(_ float64, ratio *float64) bool { return ratio != nil && *ratio >= r }}
}

// both is met when a and b are.
func both(a, b *target) *target {
	return &target{text: a.text + "; " + b.text, ok: func(v float64, r *float64) bool { return a.ok(v, r) && b.ok(v, r) }}
}

// row builds a Row. value or peer may be NaN for "not measured".
func row(m metric, value float64, peer string, peerValue float64, t *target, note string) Row {
	r := Row{Key: m.key, Metric: m.name, Unit: m.unit, Peer: peer, Note: note}
	if !math.IsNaN(value) {
		r.Value = &value
	}
	if peer != "" && !math.IsNaN(peerValue) {
		r.PeerValue = &peerValue
		if r.Value != nil && value > 0 && peerValue > 0 {
			ratio := value / peerValue
			if m.lowerIsBetter {
				ratio = peerValue / value
			}
			r.Ratio = &ratio
			if ratio >= 1 {
				r.RatioText = fmt.Sprintf("%s× %s", fmtNum(ratio), m.better)
			} else {
				r.RatioText = fmt.Sprintf("%s× %s", fmtNum(1/ratio), m.worse)
			}
		}
	}
	if t != nil {
		r.Target = t.text
		if r.Value != nil {
			met := t.ok(value, r.Ratio)
			r.Met = &met
		}
	}
	return r
}

// add appends r to the report.
func (rep *Report) add(r Row) { rep.Rows = append(rep.Rows, r) }

// fmtNum prints a figure with about three significant digits.
func fmtNum(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
}

func (r Row) cells() []string {
	val, peer, met := "n/a", "—", ""
	if r.Value != nil {
		val = fmtNum(*r.Value) + " " + r.Unit
	}
	if r.Peer != "" {
		peer = r.Peer + ": n/a"
		if r.PeerValue != nil {
			peer = r.Peer + ": " + fmtNum(*r.PeerValue) + " " + r.Unit
		}
	}
	if r.Met != nil {
		met = "no"
		if *r.Met {
			met = "yes"
		}
	}
	return []string{r.Metric, val, peer, orDash(r.RatioText), orDash(r.Target), orDash(met)}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

var header = []string{"figure", "sandboxd", "peer (same run)", "ratio", "target", "met"}

func (rep *Report) preamble() []string {
	rt := rep.Runtime
	if rt == "" {
		rt = "engine default"
	}
	return []string{
		fmt.Sprintf("sandbox-bench %s on %d CPUs (%s), Docker %s, runtime %s, image %s, sandboxd %s",
			rep.Date.Format(time.RFC3339), rep.CPUs, rep.Kernel, rep.DockerVersion, rt, rep.Image, rep.Sandboxd),
		"sizes: " + rep.Sizes.String(),
	}
}

// notes lists the rows' notes, numbered as the rows refer to them.
func (rep *Report) notes() (refs map[int]string, lines []string) {
	refs = map[int]string{}
	for i, r := range rep.Rows {
		if r.Note == "" {
			continue
		}
		n := len(lines) + 1
		refs[i] = fmt.Sprintf(" [%d]", n)
		lines = append(lines, fmt.Sprintf("[%d] %s", n, r.Note))
	}
	return refs, lines
}

// WriteTable prints the report as an aligned text table.
func (rep *Report) WriteTable(w io.Writer) error {
	for _, l := range rep.preamble() {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	refs, notes := rep.notes()
	for i, r := range rep.Rows {
		c := r.cells()
		c[0] += refs[i]
		fmt.Fprintln(tw, strings.Join(c, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	return nil
}

// WriteMarkdown prints the report as a Markdown table, for BENCHMARKS.md.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	for _, l := range rep.preamble() {
		fmt.Fprintf(w, "%s  \n", l)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(header, " | "), strings.Repeat("---|", len(header)))
	refs, notes := rep.notes()
	for i, r := range rep.Rows {
		c := r.cells()
		c[0] += refs[i]
		for j := range c {
			c[j] = strings.ReplaceAll(c[j], "|", `\|`)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintf(w, "%s  \n", n)
		}
	}
	return nil
}

// WriteJSON prints the report as one JSON document.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
