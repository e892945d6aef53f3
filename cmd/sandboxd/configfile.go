package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The configuration file (--config, SANDBOXD_CONFIG): TOML, one table per
// section of the settings table (settings.go), one key per setting. Flags
// win over SANDBOXD_* variables, which win over the file, which wins over
// the defaults. An unknown key or a value of the wrong type is an error,
// never ignored: a misspelt limit silently left at its default is worse
// than a refusal to start.

// maxConfigFileBytes bounds what sandboxd reads as its configuration: the
// whole documented configuration is about 30 KiB.
const maxConfigFileBytes = 1 << 20

// configFile is a configuration file read and checked against the table.
type configFile struct {
	path   string
	values map[string]fileValue // by flag name
	// applied are the values that set their setting: no flag or
	// variable overrode them.
	applied map[string]bool
}

// fileValue is one setting's value in the file.
type fileValue struct {
	text string // as the flag takes it
	raw  string // as the file wrote it, for errors
	line int
}

// fileError is one problem of a configuration file, at a line (0: the
// file as a whole).
type fileError struct {
	path string
	line int
	msg  string
}

func (e fileError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.path, e.line, e.msg)
	}
	return e.path + ": " + e.msg
}

// problems are all that is wrong with a configuration, each on a line:
// the operator fixes them in one go, not one per start.
type problems []error

func (p problems) Error() string {
	s := make([]string, len(p))
	for i, e := range p {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// sortProblems orders a file's problems by line, the file's own first.
func sortProblems(p problems) {
	slices.SortStableFunc(p, func(a, b error) int {
		var fa, fb fileError
		la, lb := -1, -1
		if errors.As(a, &fa) {
			la = fa.line
		}
		if errors.As(b, &fb) {
			lb = fb.line
		}
		return cmp.Compare(la, lb)
	})
}

// loadConfigFile reads path and checks its keys and their types against
// r's table; the values themselves are checked when they are set. With
// problems, the file holds the values that had none, so that a check can
// go on to name the bad values too; nil when the file cannot be read.
func loadConfigFile(path string, r *registry) (*configFile, problems) {
	f, err := os.Open(path)
	if err != nil {
		return nil, problems{fmt.Errorf("--config: %w", err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigFileBytes+1))
	if err != nil {
		return nil, problems{fmt.Errorf("--config: %w", err)}
	}
	if len(data) > maxConfigFileBytes {
		return nil, problems{fileError{path, 0, fmt.Sprintf("larger than %d bytes; not a sandboxd configuration", maxConfigFileBytes)}}
	}
	return parseConfigFile(path, data, r)
}

// parseConfigFile checks data, a TOML document, against r's table.
func parseConfigFile(path string, data []byte, r *registry) (*configFile, problems) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, _ := de.Position()
			return nil, problems{fileError{path, line, "not valid TOML: " + strings.TrimPrefix(de.Error(), "toml: ")}}
		}
		return nil, problems{fileError{path, 0, "not valid TOML: " + err.Error()}}
	}
	lines := keyLines(data)
	cf := &configFile{path: path, values: map[string]fileValue{}, applied: map[string]bool{}}
	var errs problems
	bad := func(at, format string, args ...any) {
		errs = append(errs, fileError{path, lines[at], fmt.Sprintf(format, args...)})
	}
	for name, v := range doc {
		sec := r.sectionNamed(name)
		table, isTable := v.(map[string]any)
		switch {
		case sec == nil && isTable:
			bad(name, "unknown section [%s]%s", name, r.suggest(name))
			continue
		case sec == nil:
			bad(name, "unknown key %s: every setting belongs to a section%s", name, r.suggest(name))
			continue
		case !isTable:
			bad(name, "%s: want a table ([%s]), got %s", name, name, tomlTypeOf(v))
			continue
		}
		for key, kv := range table {
			at := name + "." + key
			st := r.byPath[at]
			if st == nil {
				bad(at, "unknown key %s%s", at, r.suggest(key))
				continue
			}
			text, ok := valueText(st.kind, kv)
			if !ok {
				bad(at, "%s: want %s, got %s", at, st.kind.tomlType(), tomlTypeOf(kv))
				continue
			}
			cf.values[st.flag.Name] = fileValue{text: text, raw: rawValue(kv), line: lines[at]}
		}
	}
	sortProblems(errs)
	return cf, errs
}

// valueText is v as the flag of a setting of kind k takes it; false when
// v is not of the kind's TOML type.
func valueText(k kind, v any) (string, bool) {
	switch k {
	case kindString, kindDuration:
		s, ok := v.(string)
		return s, ok
	case kindBool:
		b, ok := v.(bool)
		return strconv.FormatBool(b), ok
	case kindInt:
		i, ok := v.(int64)
		return strconv.FormatInt(i, 10), ok
	case kindFloat:
		switch n := v.(type) {
		case int64:
			return strconv.FormatInt(n, 10), true
		case float64:
			return strconv.FormatFloat(n, 'g', -1, 64), true
		}
	case kindSize:
		switch n := v.(type) {
		case int64:
			return strconv.FormatInt(n, 10), true
		case string:
			return n, true
		}
	case kindList:
		a, ok := v.([]any)
		if !ok {
			return "", false
		}
		s := make([]string, len(a))
		for i, e := range a {
			if s[i], ok = e.(string); !ok {
				return "", false
			}
		}
		return strings.Join(s, ","), true
	}
	return "", false
}

// tomlTypeOf names a decoded TOML value's type.
func tomlTypeOf(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case []any:
		return "array"
	case map[string]any:
		return "table"
	}
	return fmt.Sprintf("%T", v)
}

// rawValue is a decoded value as errors quote it.
func rawValue(v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case []any:
		s := make([]string, len(v))
		for i, e := range v {
			s[i] = rawValue(e)
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// keyLines maps every key of a valid TOML document, dotted from the
// root ("limits.max_memory"; a table's header by its name), to the line
// where it is given.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	p := unstable.Parser{}
	p.Reset(data)
	var prefix []string
	var walk func(prefix []string, n *unstable.Node)
	walk = func(prefix []string, n *unstable.Node) {
		it := n.Key()
		var path []string
		line := 0
		for it.Next() {
			k := it.Node()
			path = append(path, string(k.Data))
			if line == 0 {
				line = p.Shape(k.Raw).Start.Line
			}
			full := strings.Join(append(slices.Clone(prefix), path...), ".")
			if _, ok := lines[full]; !ok {
				lines[full] = line
			}
		}
		if n.Kind == unstable.KeyValue {
			if v := n.Value(); v.Kind == unstable.InlineTable {
				full := append(slices.Clone(prefix), path...)
				c := v.Children()
				for c.Next() {
					walk(full, c.Node())
				}
			}
		}
	}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			prefix = nil
			walk(nil, e)
			it := e.Key()
			for it.Next() {
				prefix = append(prefix, string(it.Node().Data))
			}
		case unstable.KeyValue:
			walk(prefix, e)
		}
	}
	return lines
}

// sectionNamed is the section called name, or nil.
func (r *registry) sectionNamed(name string) *section {
	for _, s := range r.sections {
		if s.name == name {
			return s
		}
	}
	return nil
}

// suggest names the setting an unknown key probably meant: a flag's name
// (max-memory) or a key put in the wrong section.
func (r *registry) suggest(key string) string {
	if st := r.byFlag[strings.ReplaceAll(key, "_", "-")]; st != nil {
		return "; did you mean " + st.path() + " (--" + st.flag.Name + ")?"
	}
	var in []string
	for _, s := range r.sections {
		for _, st := range s.settings {
			if st.key == key {
				in = append(in, st.path())
			}
		}
	}
	if len(in) > 0 {
		return "; did you mean " + strings.Join(in, " or ") + "?"
	}
	return ""
}

// flagMention finds the flags an error message names.
var flagMention = regexp.MustCompile(`--[a-z0-9]+(?:-[a-z0-9]+)*`)

// locate turns a check's error into a problem of the file when it names a
// setting the file gave: at that setting's line, naming settings by their
// keys. Errors about flags and defaults alone stay as they are.
func (cf *configFile) locate(err error, r *registry) error {
	if cf == nil {
		return err
	}
	msg := err.Error()
	line := 0
	for _, m := range flagMention.FindAllString(msg, -1) {
		if fv, ok := cf.values[m[2:]]; ok && cf.applied[m[2:]] && (line == 0 || fv.line < line) {
			line = fv.line
		}
	}
	if line == 0 {
		return err
	}
	msg = flagMention.ReplaceAllStringFunc(msg, func(m string) string {
		if st := r.byFlag[m[2:]]; st != nil {
			return st.path()
		}
		return m
	})
	return fileError{cf.path, line, msg}
}
