package main

import (
	"encoding"
	"flag"
	"fmt"
	"strings"
	"time"
)

// The settings table: every setting of sandboxd is registered once, by the
// section that owns it, with its file key, its flag, its default and its
// help. The flags, their SANDBOXD_* variables, the configuration file's
// keys, `sandboxd config default` and docs/configuration.md's reference
// are all derived from it, so they cannot drift apart.

// kind is what a setting's value is, as the configuration file writes it.
type kind int

const (
	kindString   kind = iota
	kindBool          // true or false
	kindInt           // an integer
	kindFloat         // a number
	kindDuration      // a string such as "10m" or "1h30m"
	kindSize          // a string such as "512MiB" or "1GiB", or an integer number of bytes
	kindList          // an array of strings (the flag takes them comma-separated)
)

// tomlType names a kind in errors and in the reference.
func (k kind) tomlType() string {
	return [...]string{
		kindString:   "string",
		kindBool:     "boolean",
		kindInt:      "integer",
		kindFloat:    "number",
		kindDuration: `duration string (such as "10m")`,
		kindSize:     `size (a string such as "512MiB", or bytes)`,
		kindList:     "array of strings",
	}[k]
}

// setting is one row of the table.
type setting struct {
	section *section
	key     string // the file key within its section, snake_case
	flag    *flag.Flag
	kind    kind
}

// path is the setting's dotted name, as errors give it: "limits.max_memory".
func (s *setting) path() string { return s.section.name + "." + s.key }

// env is the setting's environment variable.
func (s *setting) env() string { return envName(s.flag.Name) }

// section is one table of the configuration file, owned by one subsystem.
type section struct {
	name, doc string
	settings  []*setting
}

// registry is the table being built, and the flag set it defines.
type registry struct {
	fs       *flag.FlagSet
	sections []*section
	byFlag   map[string]*setting
	byPath   map[string]*setting
}

func newRegistry(fs *flag.FlagSet) *registry {
	return &registry{fs: fs, byFlag: map[string]*setting{}, byPath: map[string]*setting{}}
}

// section starts a section; its settings follow, in the order the
// reference lists them.
func (r *registry) section(name, doc string) sectionReg {
	s := &section{name: name, doc: doc}
	r.sections = append(r.sections, s)
	return sectionReg{r, s}
}

// sectionReg registers the settings of one section.
type sectionReg struct {
	r *registry
	s *section
}

// add records the flag just defined as key. A flag or key given twice is a
// programming error, caught by every test that parses a configuration.
func (sr sectionReg) add(key, name string, k kind) {
	f := sr.r.fs.Lookup(name)
	st := &setting{section: sr.s, key: key, flag: f, kind: k}
	if f == nil || sr.r.byFlag[name] != nil || sr.r.byPath[st.path()] != nil {
		panic(fmt.Sprintf("settings: flag --%s as %s registered twice or not defined", name, st.path()))
	}
	sr.s.settings = append(sr.s.settings, st)
	sr.r.byFlag[name], sr.r.byPath[st.path()] = st, st
}

// String registers a string setting.
func (sr sectionReg) String(key string, p *string, name, def, help string) {
	sr.r.fs.StringVar(p, name, def, help)
	sr.add(key, name, kindString)
}

// List registers a setting the flag takes comma-separated and the file
// as an array of strings.
func (sr sectionReg) List(key string, p *string, name, def, help string) {
	sr.r.fs.StringVar(p, name, def, help)
	sr.add(key, name, kindList)
}

// Bool registers a boolean setting.
func (sr sectionReg) Bool(key string, p *bool, name string, def bool, help string) {
	sr.r.fs.BoolVar(p, name, def, help)
	sr.add(key, name, kindBool)
}

// Int registers an integer setting.
func (sr sectionReg) Int(key string, p *int, name string, def int, help string) {
	sr.r.fs.IntVar(p, name, def, help)
	sr.add(key, name, kindInt)
}

// Int64 registers an integer setting held in an int64.
func (sr sectionReg) Int64(key string, p *int64, name string, def int64, help string) {
	sr.r.fs.Int64Var(p, name, def, help)
	sr.add(key, name, kindInt)
}

// Float registers a number setting.
func (sr sectionReg) Float(key string, p *float64, name string, def float64, help string) {
	sr.r.fs.Float64Var(p, name, def, help)
	sr.add(key, name, kindFloat)
}

// Duration registers a duration setting.
func (sr sectionReg) Duration(key string, p *time.Duration, name string, def time.Duration, help string) {
	sr.r.fs.DurationVar(p, name, def, help)
	sr.add(key, name, kindDuration)
}

// Size registers a size in bytes held in an int64.
func (sr sectionReg) Size(key string, p *int64, name string, def int64, help string) {
	*p = def
	sr.r.fs.Var((*byteSize)(p), name, help)
	sr.add(key, name, kindSize)
}

// Text registers a setting parsed by its own UnmarshalText, written as a
// string.
func (sr sectionReg) Text(key string, p encoding.TextUnmarshaler, name string, def encoding.TextMarshaler, help string) {
	sr.r.fs.TextVar(p, name, def, help)
	sr.add(key, name, kindString)
}

// Var registers a setting of its own flag.Value, written in the file as k.
func (sr sectionReg) Var(key string, v flag.Value, k kind, name, help string) {
	sr.r.fs.Var(v, name, help)
	sr.add(key, name, k)
}

// tomlDefault is the setting's default as a TOML value.
func (s *setting) tomlDefault() string {
	d := s.flag.DefValue
	switch s.kind {
	case kindBool, kindInt, kindFloat:
		return d
	case kindDuration:
		return tomlString(shortDuration(d))
	case kindList:
		var parts []string
		for _, e := range strings.Split(d, ",") {
			if e = strings.TrimSpace(e); e != "" {
				parts = append(parts, tomlString(e))
			}
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return tomlString(d)
}

// shortDuration drops a duration's zero tails: 30m0s is 30m, 1h0m0s 1h.
func shortDuration(d string) string {
	if strings.HasSuffix(d, "m0s") {
		d = strings.TrimSuffix(d, "0s")
	}
	if strings.HasSuffix(d, "h0m") {
		d = strings.TrimSuffix(d, "0m")
	}
	if d == "0s" {
		return "0"
	}
	return d
}

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
