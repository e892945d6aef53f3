// Package termsafe makes text that came from a sandbox, a tenant or a
// record safe to print on an operator's terminal. Such text is hostile: a
// newline in a file name forges a row of a table, a tab moves a value
// into the next column, an escape sequence (ESC [ 2 J, OSC 52) clears the
// screen, sets the window title or writes the clipboard, a carriage
// return overwrites what was printed before it, and a bidirectional
// override (U+202E) makes a name read backwards.
//
// Unsafe is every rune that is not graphic in Unicode's sense: the C0
// controls (tab and newline included), DEL, the C1 controls, the format
// characters (bidi overrides and isolates, zero-width characters, U+FEFF),
// the line and paragraph separators, private-use and unassigned code
// points, and every byte that is not valid UTF-8. Letters, marks, digits,
// punctuation, symbols and spaces of every script are safe: names in
// Chinese or Greek stay readable.
//
// Every CLI that prints such values (sandboxctl's tables, lines and JSON,
// the agent's chat) goes through this one package, so what is safe is
// decided once.
package termsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// unsafeRune reports whether r, decoded from size bytes, must not reach
// a terminal as it is.
func unsafeRune(r rune, size int) bool {
	return (r == utf8.RuneError && size == 1) || !unicode.IsGraphic(r)
}

// Safe reports whether s can be printed as it is: it holds no unsafe rune.
func Safe(s string) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r, size) {
			return false
		}
		i += size
	}
	return true
}

// Field returns s for one value in a table's cell or a line (a path, a
// name, a language): s itself when it holds no unsafe rune and does not
// begin with a double quote; otherwise s quoted in Go's syntax, the
// unsafe runes escaped ("a\nb", "\x1b[2J", "\u202etxt.exe", "\xff") and
// its quotes and backslashes, the rest as it is (strconv.QuoteToGraphic). So the result is always one line with
// no control characters, and it says unambiguously what s was: a result
// that begins with a double quote is s quoted (strconv.Unquote reads it
// back), any other is s itself.
func Field(s string) string {
	if Safe(s) && !strings.HasPrefix(s, `"`) {
		return s
	}
	return strconv.QuoteToGraphic(s)
}

// Line returns a line of free text (a line of a template's build log, an
// error's message) with each unsafe rune escaped where it stands, as Go
// would escape it in a string ("\x1b", "\r", "\n", "\u202e", "\xff"), and
// everything else (tabs included, and backslashes) left as it is. Unlike
// Field it does not quote: the line stays readable, at the cost that a
// backslash the text itself holds looks like an escape; the text cannot
// drive the terminal or print a second line.
func Line(s string) string {
	return line(s, false)
}

// Text is Line for text of several lines: newlines are kept as well.
func Text(s string) string {
	return line(s, true)
}

// line escapes s's unsafe runes but tabs (and newlines, if keepNewlines)
// in place; s itself, not a copy, when there are none.
func line(s string, keepNewlines bool) string {
	kept := func(r rune, size int) bool {
		return !unsafeRune(r, size) || r == '\t' || (keepNewlines && r == '\n')
	}
	i := 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		if !kept(r, size) {
			break
		}
		i += size
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case kept(r, size):
			b.WriteString(s[i : i+size])
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		default:
			q := strconv.QuoteRuneToGraphic(r) // '\x1b', '\u202e', '\n'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// JSON returns JSON text with every unsafe rune escaped as \uXXXX (a
// surrogate pair past U+FFFF), and every invalid byte as \ufffd: the same
// JSON, values unchanged, but nothing in it drives a terminal. Encoders
// escape the C0 controls but leave DEL, the C1 controls and the bidi
// overrides raw. Outside strings JSON holds only ASCII, whose whitespace
// (space, tab, newline, carriage return) is kept; a raw one cannot be
// inside a string of valid JSON.
func JSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if !unsafeRune(r, size) || r == ' ' || r == '\t' || r == '\n' || r == '\r' {
			if out != nil {
				out = append(out, b[i:i+size]...)
			}
			i += size
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r > 0xFFFF {
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	if out == nil {
		return b
	}
	return out
}
